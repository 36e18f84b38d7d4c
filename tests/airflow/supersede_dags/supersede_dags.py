"""DAGs for the supersede tests: two DAGs share the lease ``sup/rows`` and
write fenced rows (``SqlFence``) into one SQLite file under
``$SUPERSEDE_RECORD_DIR``.

- ``sup_op`` (``LeasedPythonOperator``, its ``on_kill`` recorded): a holder
  that writes a row every 20 ms until the gate ``done`` opens;
- ``sup_deco`` (``@task.leased``): records when its body starts, writes one
  row and returns;
- ``sup_run``: the same holder's work as the one task of a DAG-run lease
  (``sup/run``) that supersedes too.

Both take ``on_busy="supersede"`` guarded by ``only_newer("logical_date")``
and have a retry, so a superseded try that were retried would show it.
Every event is a JSON line in ``events.jsonl`` (wall-clock ``t``).
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

try:  # Airflow 3
    from airflow.sdk import DAG, task
except ImportError:  # Airflow 2.11
    from airflow import DAG
    from airflow.decorators import task

from lease_integrations import StaleToken
from lease_integrations.airflow import LeasedPythonOperator
from lease_integrations.airflow.dag_run_lease import dag_run_lease
from lease_integrations.core.fencing import SqlFence
from lease_integrations.core.supersede_guards import only_newer

RECORD_DIR = Path(os.environ.get("SUPERSEDE_RECORD_DIR", "/nonexistent"))
KEY = "sup/rows"
# Margin ttl/5 = 3 s: the superseded try's ladder (on_kill, then the FAILED
# it records through Airflow's DB or API) gets about a second before the
# keeper's hard stop, room enough on a loaded two-core machine; the heartbeat
# of 2 s is how soon the old holder learns of the break.
TTL, HEARTBEAT = 15.0, 2.0
START = datetime(2026, 1, 1, tzinfo=timezone.utc)
LEASE = {"lease_key": KEY, "lease_ttl": TTL, "lease_heartbeat": HEARTBEAT,
         "on_busy": "supersede", "supersede_if": only_newer("logical_date")}
DEFAULTS = {"retries": 1, "retry_delay": timedelta(seconds=1)}
FENCE = SqlFence()


def record(event: str, **fields: Any) -> None:
    line = json.dumps({"event": event, "t": time.time(), "pid": os.getpid(), **fields},
                      default=str)
    with open(RECORD_DIR / "events.jsonl", "a") as f:
        f.write(line + "\n")


def write_row(token: int) -> bool:
    """One fenced write in one transaction: accepted, or refused as stale."""
    db = sqlite3.connect(RECORD_DIR / "rows.db", timeout=10, isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")
        FENCE.create_table(db)
        db.execute("CREATE TABLE IF NOT EXISTS rows (token INTEGER, pid INTEGER, t REAL)")
        try:
            FENCE.check(db, "rows", token)
        except StaleToken:
            db.execute("ROLLBACK")
            return False
        db.execute("INSERT INTO rows VALUES (?, ?, ?)", (token, os.getpid(), time.time()))
        db.execute("COMMIT")
        return True
    finally:
        db.close()


def _running(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _started(context: dict[str, Any]) -> int:
    """Record the body's start, and whether the holder it superseded (the
    ``supersedes`` entry of its lease meta) still ran at that moment."""
    lease, ti = context["lease"], context["ti"]
    replaced = (lease.meta or {}).get("supersedes") or {}
    tail = str(replaced.get("holder", "")).rsplit(":", 1)[-1]
    pid = int(tail) if tail.isdigit() else 0  # a run's holder (dagrun:...) names no pid
    record("body", dag_id=ti.dag_id, run_id=ti.run_id, try_number=ti.try_number,
           token=lease.token, meta=lease.meta, replaced_pid=pid or None,
           replaced_running=_running(pid) if pid else None)
    return int(lease.token)


def hold_and_write(**context: Any) -> None:
    token = _started(context)
    while not (RECORD_DIR / "done").exists():
        if not write_row(token):
            record("rejected", token=token)
        time.sleep(0.02)
    record("finished", token=token)


class RecordingOperator(LeasedPythonOperator):
    """Records when ``on_kill`` ran (the fail-stop ladder's stop hook)."""

    def on_kill(self) -> None:
        record("on_kill")
        super().on_kill()


with DAG("sup_op", schedule="@daily", start_date=START, catchup=False,
         default_args=DEFAULTS) as sup_op:
    RecordingOperator(task_id="write", python_callable=hold_and_write, **LEASE)

with DAG("sup_deco", schedule="@daily", start_date=START, catchup=False,
         default_args=DEFAULTS) as sup_deco:

    @task.leased(**LEASE)
    def write(**context: Any) -> None:
        token = _started(context)
        record("written", token=token, accepted=write_row(token))

    write()


with DAG("sup_run", schedule=None, start_date=START, catchup=False,
         default_args=DEFAULTS) as sup_run, \
        dag_run_lease(lease_key="sup/run", lease_ttl=TTL, lease_heartbeat=HEARTBEAT,
                      on_busy="supersede", supersede_if=only_newer("logical_date")):

    @task
    def run_work(**context: Any) -> None:
        hold_and_write(**context)

    run_work()

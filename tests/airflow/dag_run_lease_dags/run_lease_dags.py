"""DAGs for the DAG-run lease tests (run by a real scheduler and triggerer).

Every work task appends its start and end (with run, token, pid) to
``$RUN_LEASE_RECORD_DIR/events.jsonl``, and can be held at a gate: with
``conf={"gate": {"build": "go-a"}}`` the run's ``build`` waits until the
file ``go-a`` exists in the record dir. A task writes ``<run tag>-<task>.pid``
(its pid and its parent's) so a test can kill its process.
"""

# ruff: noqa: SIM117  (the lease block reads best nested inside the DAG block)
from __future__ import annotations

import json
import os
import time
from datetime import datetime
from pathlib import Path
from typing import Any

try:  # Airflow 3
    from airflow.sdk import DAG, task
except ImportError:  # Airflow 2.11
    from airflow import DAG
    from airflow.decorators import task

from lease_integrations.airflow.dag_run_lease import dag_run_lease

RECORD = Path(os.environ.get("RUN_LEASE_RECORD_DIR", "/tmp/run-lease-records"))
TTL = 20.0
GATE_WAIT = 240.0


def _record(context: Any, event: str) -> None:
    lease = context["lease"]
    line = {"dag_id": context["ti"].dag_id, "run_id": context["ti"].run_id,
            "task": context["ti"].task_id, "event": event, "token": lease.token,
            "pid": os.getpid(), "at": time.time()}
    with open(RECORD / "events.jsonl", "a") as out:
        out.write(json.dumps(line) + "\n")


def _work(context: Any) -> None:
    """Record start, write a pid file, wait at the gate if the run has one, record end."""
    ti = context["ti"]
    _record(context, "start")
    conf = context["dag_run"].conf or {}
    tag = conf.get("tag", "run")
    (RECORD / f"{tag}-{ti.task_id}.pid").write_text(f"{os.getpid()} {os.getppid()}")
    gate = (conf.get("gate") or {}).get(ti.task_id)
    if gate:
        deadline = time.monotonic() + GATE_WAIT
        while not (RECORD / gate).exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"gate {gate} never opened")
            try:  # job code that handles errors per step must not swallow a lost lease
                time.sleep(0.1)
            except Exception as exc:
                _record(context, f"swallowed {exc!r}")
    _record(context, "end")


def _three_tasks() -> None:
    @task
    def extract(**context: Any) -> None:
        _work(context)

    @task
    def build(**context: Any) -> None:
        _work(context)

    @task
    def swap(**context: Any) -> None:
        _work(context)

    extract() >> build() >> swap()


# Two runs of this DAG (a backfill and a manual trigger) contend; the second waits, deferred.
# end_date: only backfills and manual runs, never a scheduled run of "today".
with DAG(dag_id="rl_rebuild", schedule="@daily", start_date=datetime(2026, 1, 1),
         end_date=datetime(2026, 1, 3), catchup=False, default_args={"retries": 0}):
    with dag_run_lease(lease_key="rl-index", lease_ttl=TTL, on_busy="wait", deferrable=True,
                       poll_interval=1.0):
        _three_tasks()

# Shares the key and skips while it is held.
with DAG(dag_id="rl_rebuild_skip", schedule=None, start_date=datetime(2026, 1, 1),
         default_args={"retries": 0}):
    with dag_run_lease(lease_key="rl-index", lease_ttl=TTL, on_busy="skip"):
        _three_tasks()

# Shares the key and fails while it is held.
with DAG(dag_id="rl_rebuild_fail", schedule=None, start_date=datetime(2026, 1, 1),
         default_args={"retries": 0}):
    with dag_run_lease(lease_key="rl-index", lease_ttl=TTL, on_busy="fail"):
        _three_tasks()

# Broken from outside mid-run.
with DAG(dag_id="rl_broken", schedule=None, start_date=datetime(2026, 1, 1),
         default_args={"retries": 0}):
    with dag_run_lease(lease_key="rl-broken", lease_ttl=TTL, on_busy="fail"):
        _three_tasks()

# The worker of a run is SIGKILLed; the next run waits (on a worker) for the ttl.
with DAG(dag_id="rl_crash", schedule=None, start_date=datetime(2026, 1, 1),
         default_args={"retries": 0}):
    with dag_run_lease(lease_key="rl-crash", lease_ttl=TTL, on_busy="wait", poll_interval=1.0):
        _three_tasks()

# Broken between two tasks: ``pause`` is outside the lease block (unguarded), so
# the break lands while no guarded task runs; ``after`` must then refuse to start.
with DAG(dag_id="rl_between", schedule=None, start_date=datetime(2026, 1, 1),
         default_args={"retries": 0}):
    with dag_run_lease(lease_key="rl-between", lease_ttl=TTL, on_busy="fail") as lease:

        @task
        def after(**context: Any) -> None:
            _work(context)

        guarded = after()

    @task
    def pause(**context: Any) -> None:
        (RECORD / "between-pause.started").touch()
        deadline = time.monotonic() + GATE_WAIT
        while not (RECORD / "go-between").exists():
            if time.monotonic() > deadline:
                raise TimeoutError("gate go-between never opened")
            time.sleep(0.1)

    lease.acquire >> pause() >> guarded


# The guard's timing (run under dag.test(), where no keeper runs): ``hold`` keeps
# the lease by itself while it runs, ticks into ``guard-ticks`` while it works,
# and writes ``guard-lost`` when the loss is known (fail-stop then ends the process).
with DAG(dag_id="rl_guard_late", schedule=None, start_date=datetime(2026, 1, 1),
         default_args={"retries": 0}) as guard_late:
    with dag_run_lease(lease_key="rl-guard-late", lease_ttl=3.0, lease_heartbeat=1.0,
                       on_busy="fail"):

        @task
        def hold(**context: Any) -> None:
            _record(context, "start")
            context["lease"].on_lost(
                lambda _lease: (RECORD / "guard-lost").write_text(f"{time.time():.6f}"))
            ticks = os.open(RECORD / "guard-ticks", os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            deadline = time.monotonic() + GATE_WAIT
            while not (RECORD / "go-guard").exists():
                if time.monotonic() > deadline:
                    raise TimeoutError("gate go-guard never opened")
                os.write(ticks, f"{time.time():.6f}\n".encode())
                time.sleep(0.02)
            _record(context, "end")

        hold()

# Every task in a pool of one slot: the keeper must start before the work.
with DAG(dag_id="rl_pool_one", schedule=None, start_date=datetime(2026, 1, 1),
         default_args={"retries": 0, "pool": "rl_one"}):
    with dag_run_lease(lease_key="rl-pool-one", lease_ttl=TTL, on_busy="fail"):
        _three_tasks()

# A run whose teardown never runs (the test marks it success beforehand).
with DAG(dag_id="rl_no_teardown", schedule=None, start_date=datetime(2026, 1, 1),
         default_args={"retries": 0}):
    with dag_run_lease(lease_key="rl-no-teardown", lease_ttl=TTL, on_busy="fail"):
        _three_tasks()

"""The guard's timing: a work task under the run's lease is stopped when the
lease's trust window closes, before the store can give the key to another run.

Run under ``dag.test()`` (no triggerer, so no keeper: as if it had been
killed) with ttl 3 s and heartbeat 1 s. The old guard only read the record
once per heartbeat: the lease expired under the running task, and another run
was granted the key up to a heartbeat before the task stopped. Now the task
adopts the lease (it keeps it alive itself while it runs), and when the store
stops answering, the core's trust window closes and fail-stop ends the
process running the task (``dag.test()``'s, status 75) before the store's own
expiry: the task's last sign of work comes before the expiry the store
recorded, and so before the next grant, judged by the store's clock.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from scheduler_harness import poll

from lease_integrations import LEASE_LOST_EXIT_STATUS, LeaseLock, connect

DAGS = Path(__file__).resolve().parent / "dag_run_lease_dags" / "run_lease_dags.py"
KEY, TTL = "rl-guard-late", 3.0


def _events(records: Path, event: str) -> list[dict[str, Any]]:
    path = records / "events.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [e for e in map(json.loads, lines) if e["event"] == event]


@pytest.mark.timeout(300)
def test_task_is_stopped_before_another_run_gets_the_key(airflow_home: Path,
                                                         tmp_path: Path) -> None:
    db = tmp_path / "leases.db"
    records = tmp_path / "records"
    records.mkdir()
    script = ("import runpy\n"
              f"runpy.run_path({str(DAGS)!r})['guard_late'].test()\n")
    env = {**os.environ, "LEASE_STORE_URL": f"sqlite://{db}?timeout=0.2",
           "RUN_LEASE_RECORD_DIR": str(records), "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS.parent)}
    with open(tmp_path / "run.log", "wb") as out:
        run = subprocess.Popen([sys.executable, "-c", script], env=env, cwd=str(airflow_home),
                               stdout=out, stderr=subprocess.STDOUT)
    blocker = sqlite3.connect(db, isolation_level=None)
    locked = False
    try:
        poll(lambda: _events(records, "start"), "the guarded task to start", 180)
        with connect(f"sqlite://{db}") as store:
            # No keeper runs: only the task's own adoption can keep the lease past two ttls.
            poll(lambda: (r := store.get(KEY)) is not None and r.held and r.renewed_at
                 and r.acquired_at and (r.renewed_at - r.acquired_at).total_seconds() > 2 * TTL,
                 "the running task to keep the run's lease alive", 30)
            # The store stops answering (a real SQLite write lock held elsewhere).
            blocker.execute("BEGIN EXCLUSIVE")
            locked = True
            assert run.wait(3 * TTL) == LEASE_LOST_EXIT_STATUS
            blocker.execute("ROLLBACK")
            locked = False
            # The store's own word on when it could give the key away: the expiry
            # of the last renewal it accepted. The next run takes it from then on.
            record = store.get(KEY)
            assert record is not None and record.expires_at is not None
            expires = record.expires_at.timestamp()
            lease = LeaseLock(store, KEY, ttl=TTL).acquire(wait=30)  # the next run
            granted = [e.at.timestamp() for e in store.history(KEY, limit=100)
                       if e.kind == "acquired" and e.token == lease.token]
        lost_at = float((records / "guard-lost").read_text())
        last = max(float(t) for t in (records / "guard-ticks").read_text().split())
        print(f"\nDAG-run guard, trust window: last work {last - lost_at:+.3f} s after the loss "
              f"was known, {expires - last:.3f} s before the store's expiry, "
              f"{granted[0] - last:.3f} s before the next grant")
        assert last < expires <= granted[0], (last, expires, granted)
        assert not _events(records, "end")
    finally:
        if locked:
            blocker.execute("ROLLBACK")
        blocker.close()
        (records / "go-guard").touch()
        if run.poll() is None:
            run.kill()
            run.wait()
    log = (tmp_path / "run.log").read_text(errors="replace")
    assert "no successful renewal within the trust window" in log, log[-3000:]
    assert "stopping this process and everything it started (exit status 75)" in log, log[-3000:]

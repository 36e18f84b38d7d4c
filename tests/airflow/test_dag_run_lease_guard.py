"""The guard's timing: a work task under the run's lease is interrupted at the
lease's trust deadline, before the store can give the key to another run.

Run under ``dag.test()`` (no triggerer, so no keeper: as if it had been
killed) with ttl 3 s and heartbeat 1 s. The old guard only read the record
once per heartbeat: the lease expired under the running task, and another run
was granted the key up to a heartbeat before the task was interrupted. Now the
task adopts the lease (it keeps it alive itself while it runs), and when the
store stops answering, the core's trust window interrupts it before the
store's expiry, so the history shows the next grant after the interruption.
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

from lease_integrations import LeaseLock, connect

DAGS = Path(__file__).resolve().parent / "dag_run_lease_dags" / "run_lease_dags.py"
KEY, TTL = "rl-guard-late", 3.0


def _events(records: Path, event: str) -> list[dict[str, Any]]:
    path = records / "events.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [e for e in map(json.loads, lines) if e["event"] == event]


@pytest.mark.timeout(300)
def test_task_is_interrupted_before_another_run_gets_the_key(airflow_home: Path,
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
    try:
        poll(lambda: _events(records, "start"), "the guarded task to start", 180)
        with connect(f"sqlite://{db}") as store:
            # No keeper runs: only the task's own adoption can keep the lease past two ttls.
            poll(lambda: (r := store.get(KEY)) is not None and r.held and r.renewed_at
                 and r.acquired_at and (r.renewed_at - r.acquired_at).total_seconds() > 2 * TTL,
                 "the running task to keep the run's lease alive", 30)
            # The store stops answering (a real SQLite write lock held elsewhere).
            blocker.execute("BEGIN EXCLUSIVE")
            poll(lambda: _events(records, "interrupted"), "the task to be interrupted", 3 * TTL)
            blocker.execute("ROLLBACK")
            lease = LeaseLock(store, KEY, ttl=TTL).acquire(wait=30)  # the next run
            interrupted_at = _events(records, "interrupted")[0]["at"]
            granted = [e for e in store.history(KEY, limit=100)
                       if e.kind == "acquired" and e.token == lease.token]
            assert granted and granted[0].at.timestamp() > interrupted_at, (
                granted, interrupted_at)
            assert not _events(records, "end")
    finally:
        blocker.close()
        (records / "go-guard").touch()
        try:
            run.wait(120)
        finally:
            if run.poll() is None:
                run.kill()
    log = (tmp_path / "run.log").read_text(errors="replace")
    # What lands inside the task is the core's interrupt (a BaseException).
    assert "LeaseInterrupted" in log or "LeaseLost" in log, log[-3000:]

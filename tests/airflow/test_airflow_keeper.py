"""The keeper under Airflow (issue 31): a task busy in one call that keeps
the GIL for 2.5 ttl (``keeper_dags/keeper_dags.py``), run by ``dag.test()``
in a process of its own, keeps its lease: the try succeeds and a contender
in another process, trying every 50 ms, is granted nothing while it runs
(the store's history). The in-process heartbeat starved in that call: the
lease expired, the contender was granted, and the task was stopped after it."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lease_integrations import connect
from tests.keeper.keeper_runs import Contender, figures, wait_until_kept

DAGS = Path(__file__).resolve().parent / "keeper_dags"
TTL, CALL = 2.0, 5  # as in the DAG file
MARGIN = TTL / 5
KEY = "airflow/lk_busy/job"


def task_states(airflow_home: Path, dag_id: str) -> set[str]:
    with sqlite3.connect(airflow_home / "airflow.db") as db:
        return {s for (s,) in db.execute("SELECT state FROM task_instance WHERE dag_id = ?",
                                         (dag_id,))}


@pytest.mark.timeout(300)
def test_dag_test_busy_task_keeps_its_lease(airflow_home: Path, tmp_path: Path) -> None:
    store_url = f"sqlite://{tmp_path}/leases.db"
    records = tmp_path / "records"
    contender = Contender(tmp_path / "contender.out", store_url, KEY, TTL)
    script = f"import runpy\nrunpy.run_path({str(DAGS / 'keeper_dags.py')!r})['lk_busy'].test()\n"
    env = {**os.environ, "LEASE_STORE_URL": store_url, "KEEPER_RECORD_DIR": str(records),
           "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS)}
    with open(tmp_path / "run.log", "wb") as out:
        run = subprocess.Popen([sys.executable, "-c", script], env=env, cwd=str(airflow_home),
                               stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 180
        while not (records / "pid").exists():
            assert run.poll() is None, (tmp_path / "run.log").read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, "the task never started"
            time.sleep(0.02)
        with connect(store_url) as store:
            record = store.get(KEY)
        assert record is not None and record.held, record
        wait_until_kept(int((records / "pid").read_text()), store_url, KEY, record.token)
        (records / "go").touch()
        while not (records / "call-start").exists():
            assert run.poll() is None, (tmp_path / "run.log").read_text(errors="replace")[-3000:]
            time.sleep(0.01)
        call_start = float((records / "call-start").read_text())
        contender.start_trying(before=call_start + TTL - MARGIN)
        status = run.wait(CALL + 120)
        log = (tmp_path / "run.log").read_text(errors="replace")
        contender.end()
        with connect(store_url) as store:
            events = [(e.kind, e.token) for e in store.history(KEY)]
        call_end = records / "call-end"
        figures(test="busy-holder", face="airflow-dag.test", store="sqlite",
                call_s=float(call_end.read_text()) - call_start if call_end.exists() else -1.0,
                status=status, task_states=",".join(sorted(task_states(airflow_home, "lk_busy"))))
        assert status == 0, log[-3000:]
        assert task_states(airflow_home, "lk_busy") == {"success"}, log[-3000:]
        assert len(events) >= 2 and events[0][0] == "acquired", events
        assert events[1] == ("released", events[0][1]), (
            f"someone was granted the busy task's lease, or its release was refused: {events}")
    finally:
        contender.end()
        if run.poll() is None:
            run.kill()
            run.wait()

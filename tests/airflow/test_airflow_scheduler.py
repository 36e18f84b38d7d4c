"""End to end through Airflow's real scheduler, LocalExecutor, dag processor,
triggerer and api-server (all on 127.0.0.1, started and stopped by PID): a
backfill and manual triggers of one DAG overlap, and its leased task runs
once at a time, with strictly increasing tokens.

The metadata DB here is PostgreSQL (the test server), not SQLite: with four
Airflow components writing at once, Airflow's SQLite DB answers "database is
locked" (Airflow itself refuses backfills on SQLite under concurrent access),
which would test Airflow's SQLite handling, not the lease."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from harness import AIRFLOW_2, HERE, events
from scheduler_harness import AirflowCluster, metadata_db, poll

from lease_integrations import connect

RUN_WAIT = 300.0


def server_db_on_airflow_2(request: pytest.FixtureRequest) -> dict[str, str]:
    """The metadata DB setting for a cluster that runs on SQLite on 3.x: Airflow
    2.11 refuses LocalExecutor on SQLite, so there a fresh PostgreSQL database."""
    if not AIRFLOW_2:
        return {}
    return {"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN":
            metadata_db(request.getfixturevalue("postgres_server"))}


@pytest.mark.slow
def test_backfill_and_manual_runs_never_overlap(record_dir: Path, tmp_path: Path,
                                                postgres_server: Any) -> None:
    dags = tmp_path / "dags"
    dags.mkdir()
    shutil.copy(HERE / "dags" / "lease_test_dags.py", dags)
    store_url = f"sqlite://{tmp_path}/e2e-leases.db"
    db_url = metadata_db(postgres_server)
    cluster = AirflowCluster(tmp_path / "home", dags, extra_env={
        "LEASE_TEST_RECORD_DIR": str(record_dir), "LEASE_STORE_URL": store_url,
        # psycopg 3 serves both engines (Airflow's async default would need asyncpg).
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": db_url,
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC": db_url})
    try:
        cluster.start()
        cluster.wait_dag("lt_e2e")
        cluster.backfill("lt_e2e", "2026-01-01T00:00:00Z", "2026-01-03T00:00:00Z")
        manual = [cluster.trigger("lt_e2e") for _ in range(2)]

        def all_done() -> list[dict[str, Any]] | None:
            runs = cluster.runs("lt_e2e")
            backfilled = [r for r in runs if r["run_type"] == "backfill"]
            finished = all(r["state"] in ("success", "failed") for r in runs)
            return runs if finished and len(backfilled) >= 2 else None

        runs = poll(all_done, "every run of lt_e2e to finish", RUN_WAIT, 1.0)
        states = {r["dag_run_id"]: cluster.task_states("lt_e2e", r["dag_run_id"])["job"]
                  for r in runs}
        assert set(states.values()) == {"success"}, (states, cluster.tail("scheduler"))
        assert set(manual) <= set(states)
        # Every try's log as the workers wrote it (the API only serves a TI's latest try).
        logs = "\n".join(path.read_text(errors="replace") for path in
                         (tmp_path / "home" / "logs" / "dag_id=lt_e2e").rglob("*.log"))
        killed_log = mark_failed_while_running(cluster, record_dir, store_url)
    finally:
        cluster.stop()

    log = [e for e in events(record_dir) if e["dag_id"] == "lt_e2e"]
    starts = sorted((e for e in log if e["event"] == "start"), key=lambda e: e["t"])
    # Every run executed the callable exactly once...
    assert sorted(e["run_id"] for e in starts) == sorted(states)
    run_types = {e["meta"]["run_type"] for e in starts}
    assert {"backfill", "manual"} <= run_types
    # ...one at a time, in token order...
    holder = None
    for event in sorted(log, key=lambda e: e["t"]):
        if event["event"] == "start":
            assert holder is None, f"{event['run_id']} started while {holder} held the lease"
            holder = event["run_id"]
        else:
            assert event["run_id"] == holder
            holder = None
    tokens = [e["token"] for e in starts]
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)
    # ...and they really contended: some run had to wait, and its log said for whom.
    assert "waiting up to" in logs and "is held by" in logs
    with connect(store_url) as store:
        record = store.get("airflow/lt_e2e/job")
    assert record is not None and not record.held and record.token == tokens[-1]
    assert re.search(r"SIGTERM: releasing lease airflow/lt_e2e_kill/job \(token \d+\)", killed_log)


def mark_failed_while_running(cluster: AirflowCluster, record_dir: Path, store_url: str) -> str:
    """A person marks a running leased task failed: Airflow's supervisor sends
    SIGTERM (SIGKILL 5 s later); the lease must be free long before its 60 s
    ttl, i.e. released by the task's SIGTERM handler. Meanwhile a deferrable
    waiter sits in the real triggerer (state ``deferred``: no worker slot) and
    takes the lease once it is free. Returns the killed task's log."""
    key = "airflow/lt_e2e_kill/job"
    cluster.wait_dag("lt_e2e_kill")
    cluster.wait_dag("lt_e2e_defer")
    run_id = cluster.trigger("lt_e2e_kill")
    poll(lambda: any(e["dag_id"] == "lt_e2e_kill" for e in events(record_dir)),
         "lt_e2e_kill to start its callable", RUN_WAIT, 0.2)
    waiter = cluster.trigger("lt_e2e_defer")
    poll(lambda: cluster.task_states("lt_e2e_defer", waiter).get("job") == "deferred",
         "the waiter to defer to the triggerer", RUN_WAIT, 0.5)
    with connect(store_url) as store:
        killed = store.get(key)
        assert killed is not None and killed.held
        cluster.api("PATCH", f"/api/v2/dags/lt_e2e_kill/dagRuns/{run_id}/taskInstances/job",
                    {"new_state": "failed"})
        poll(lambda: not store.get(key).held or store.get(key).token > killed.token,  # type: ignore[union-attr]
             "the killed task's lease to be released", 30.0, 0.2)
    assert cluster.wait_run("lt_e2e_defer", waiter, RUN_WAIT) == "success"
    resumed = [e for e in events(record_dir)
               if e["dag_id"] == "lt_e2e_defer" and e["event"] == "start"]
    assert len(resumed) == 1 and resumed[0]["token"] > killed.token
    logs = cluster.home / "logs" / "dag_id=lt_e2e_kill"
    poll(lambda: any("SIGTERM" in p.read_text(errors="replace") for p in logs.rglob("*.log")),
         "the killed task's log", 60.0, 1.0)
    return "\n".join(p.read_text(errors="replace") for p in logs.rglob("*.log"))

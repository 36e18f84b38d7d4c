"""``on_busy="supersede"`` under Airflow's real scheduler (issue 42): a
manual run supersedes the scheduled run that holds the task's lease.

``sup_op`` (``supersede_dags.py``; ``only_newer("logical_date")``, one
retry) is unpaused, so the scheduler makes a run for the latest interval,
whose try holds ``sup/rows`` and writes fenced rows. A manual run of the
same DAG with a later logical date supersedes it. Asked: the old task
process was gone when the new body began, the new token is higher, the
scheduled try ended FAILED after one try (not up for retry) and its log
names the manual run, and no old write came after the new holder's first.
Prints the time from the manual trigger to the new body.
"""

from __future__ import annotations

import shutil
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from harness import AIRFLOW_2
from scheduler_harness import EXIT_75_LOGGED, AirflowCluster, poll
from supersede_runs import DAGS, events, rows
from test_airflow_scheduler import server_db_on_airflow_2

RUN_WAIT = 600.0


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_a_manual_run_supersedes_the_scheduled_run(tmp_path: Path,
                                                   request: pytest.FixtureRequest) -> None:
    dags = tmp_path / "dags"
    dags.mkdir()
    shutil.copy(DAGS / "supersede_dags.py", dags)
    records = tmp_path / "records"
    records.mkdir()
    cluster = AirflowCluster(tmp_path / "home", dags, extra_env={
        "SUPERSEDE_RECORD_DIR": str(records),
        "LEASE_STORE_URL": f"sqlite://{tmp_path}/leases.db",
        # Only sup_op is unpaused (wait_dag), once every component is healthy.
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        **server_db_on_airflow_2(request)})
    try:
        cluster.start()
        cluster.wait_dag("sup_op")

        def holding() -> dict[str, Any] | None:
            body = events(records, "body", dag_id="sup_op")
            return body[0] if body and rows(records) else None

        held = poll(holding, "the scheduled run to hold the lease and write", RUN_WAIT, 0.2)
        scheduled = held["run_id"]
        assert held["meta"]["run_type"] == "scheduled", held
        triggered_at = time.time()
        manual = cluster.trigger("sup_op", logical_date=datetime.now(timezone.utc).isoformat())
        body = poll(lambda: next(iter(events(records, "body", run_id=manual)), None),
                    "the manual run's body", RUN_WAIT, 0.05)
        assert cluster.wait_run("sup_op", scheduled, RUN_WAIT) == "failed"
        (records / "done").touch()
        assert cluster.wait_run("sup_op", manual, RUN_WAIT) == "success"
        tries = cluster.api("GET", f"/api/v2/dags/sup_op/dagRuns/{scheduled}/taskInstances")
        old_log = cluster.task_log("sup_op", scheduled, "write", 1)
    finally:
        cluster.stop()

    assert body["replaced_running"] is False, body  # the old task process had ended
    assert body["token"] > held["token"]
    (old_try,) = tries["task_instances"]
    assert (old_try["state"], old_try["try_number"]) == ("failed", 1), old_try
    assert "this try was superseded" in old_log, old_log[-3000:]
    assert f"run {manual} of DAG sup_op" in old_log, old_log[-3000:]
    if not AIRFLOW_2:  # the supervisor read FAILED from a process that exited 0, not a crash
        assert EXIT_75_LOGGED not in old_log, old_log[-3000:]
    written = rows(records)
    first_new = next(i for i, r in enumerate(written) if r[0] == body["token"])
    assert all(r[0] == body["token"] for r in written[first_new:])
    assert events(records, "on_kill")
    print(f"\nscheduler supersede: manual trigger -> new body {body['t'] - triggered_at:.3f} s")

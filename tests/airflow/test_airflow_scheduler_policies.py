"""Every on_busy policy through Airflow's real scheduler, LocalExecutor,
triggerer and api-server on a PostgreSQL metadata DB: per policy a backfill of
3 dates and 2 manual triggers issued together, all on one task's key; and a
try SIGKILLed mid-run whose retry starts within the ttl.

One cluster start serves every variant (their keys differ, so they run side
by side without affecting each other's outcome)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from harness import AIRFLOW_2, HERE, events
from scheduler_harness import AirflowCluster, poll
from test_airflow_scheduler import metadata_db

from lease_integrations import connect

RUN_WAIT = 600.0
POLICIES = ("lt_pol_skip", "lt_pol_wait", "lt_pol_defer")
#: What the scheduler logs when it takes a deferring exit's "success" for the
#: resumed try's (apache/airflow#72716). A "failed ... but queued" line is a
#: try that could not start (an api-server timeout on a loaded machine), which
#: the one retry covers and the start events below would still reveal.
RACE = "finished with state success, but the task instance's state attribute is running"


@pytest.mark.slow
@pytest.mark.timeout(1500)  # two cores shared with other suites; alone it takes ~3 min
def test_skip_wait_and_deferrable_wait_on_the_real_scheduler(
        record_dir: Path, tmp_path: Path, postgres_server: Any) -> None:
    dags = tmp_path / "dags"
    dags.mkdir()
    shutil.copy(HERE / "policy_dags" / "policy_dags.py", dags)
    db_url = metadata_db(postgres_server)
    cluster = AirflowCluster(tmp_path / "home", dags, extra_env={
        "LEASE_TEST_RECORD_DIR": str(record_dir),
        "LEASE_STORE_URL": f"sqlite://{tmp_path}/leases.db",
        # Unpaused by wait_dag once every component is healthy, so the scheduled
        # run Airflow makes for the latest interval (catchup=False) does not
        # start before the api-server listens; it is one more contender.
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": db_url,
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC": db_url})
    try:
        cluster.start()
        for dag_id in (*POLICIES, "lt_pol_retry"):
            cluster.wait_dag(dag_id)
        retry_run = cluster.trigger("lt_pol_retry")
        for dag_id in POLICIES:
            cluster.backfill(dag_id, "2026-01-01T00:00:00Z", "2026-01-03T00:00:00Z")
            cluster.trigger(dag_id)
            cluster.trigger(dag_id)

        seen: dict[str, list[tuple[str, str, str]]] = {}

        def finished(dag_id: str) -> list[dict[str, Any]] | None:
            # 3 backfill + 2 manual runs, and the scheduled run Airflow makes
            # for the latest interval when the DAG appears (catchup=False).
            try:
                runs = cluster.runs(dag_id)
            except OSError:  # the api-server timed out a read on a loaded machine: ask again
                return None
            seen[dag_id] = sorted((r["run_type"], r["dag_run_id"], r["state"]) for r in runs)
            ours = [r for r in runs if r["run_type"] in ("backfill", "manual")]
            done = len(ours) == 5 and all(r["state"] in ("success", "failed")
                                          or left_running(dag_id, r) for r in runs)
            return runs if done else None

        def left_running(dag_id: str, run: dict[str, Any]) -> bool:
            """Airflow 2.x's backfill can set a run it has marked successful back
            to running, racing its own task's end (seen here: "Marking run
            successful", then "running" for good, its one task skipped;
            apache/airflow#34448). Such a run is settled once its backfill
            process has exited and every task of it has ended."""
            if not (AIRFLOW_2 and run["run_type"] == "backfill" and run["state"] == "running"
                    and all(proc.poll() is not None for proc in getattr(cluster, "backfills", []))):
                return False
            try:
                tasks = cluster.task_states(dag_id, run["dag_run_id"])
            except OSError:  # as in finished(): ask again
                return False
            if tasks and all(state in ("success", "skipped") for state in tasks.values()):
                stale.add((dag_id, run["dag_run_id"]))
                return True
            return False

        stale: set[tuple[str, str]] = set()

        runs = {}
        for dag_id in POLICIES:
            try:
                runs[dag_id] = poll(lambda d=dag_id: finished(d), f"the runs of {dag_id}",
                                    RUN_WAIT, 1.0)
            except AssertionError as timed_out:
                raise AssertionError(f"{timed_out}; {unfinished(cluster, dag_id, seen)}") from None
        assert cluster.wait_run("lt_pol_retry", retry_run, RUN_WAIT) == "success"
        states = {dag_id: {r["dag_run_id"]: (r["state"], r["run_type"],
                                             cluster.task_states(dag_id, r["dag_run_id"])["job"])
                           for r in dag_runs} for dag_id, dag_runs in runs.items()}
        scheduler_log = cluster.tail("scheduler", 100000)
    finally:
        cluster.stop()
    logs = {dag_id: "\n".join(p.read_text(errors="replace") for p in
                              (tmp_path / "home" / "logs" / f"dag_id={dag_id}").rglob("*.log"))
            for dag_id in (*POLICIES, "lt_pol_retry")}
    log = events(record_dir)
    for dag_id in POLICIES:
        print(dag_id, sorted(states[dag_id].values()))
    if stale:
        print("left running by Airflow's backfill, every task ended:", sorted(stale))

    for dag_id in POLICIES:
        mine = [e for e in log if e["dag_id"] == dag_id]
        assert {t for _, t, _ in states[dag_id].values()} >= {"backfill", "manual"}
        assert all(s == "success" or (dag_id, run_id) in stale
                   for run_id, (s, _, _) in states[dag_id].items()), states[dag_id]
        assert_one_at_a_time(mine)
        starts = sorted((e for e in mine if e["event"] == "start"), key=lambda e: e["t"])
        tokens = [e["token"] for e in starts]
        assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)
        assert not [line for line in scheduler_log.splitlines()
                    if RACE in line and f"{dag_id}." in line]
        run_ids = [e["run_id"] for e in starts]
        assert len(set(run_ids)) == len(run_ids), run_ids  # no run ran its callable twice
        # A day that ends while the test runs brings one more scheduled run
        # after the runs were read (a CI run crossed midnight UTC): the lease
        # checks above judge it with the rest; the counts below, only the runs read.
        judged = [r for r in run_ids if r in states[dag_id]]
        if dag_id == "lt_pol_skip":
            skipped = [r for r, (_, _, task) in states[dag_id].items() if task == "skipped"]
            assert skipped and len(judged) == len(states[dag_id]) - len(skipped), run_ids
            holders = {e["holder"] for e in starts}
            named = [line for line in logs[dag_id].splitlines() if "skipping: lease" in line]
            assert named and all(any(h in line for h in holders) for line in named)
        else:
            # Every run ran its callable exactly once, and each task succeeded.
            assert sorted(judged) == sorted(states[dag_id]), run_ids
            assert {task for _, _, task in states[dag_id].values()} == {"success"}
    assert "waiting up to" in logs["lt_pol_wait"]
    assert "deferring until it is free" in logs["lt_pol_defer"]

    # The SIGKILLed first try left its lease; the retry waited for it, then ran.
    # Under load Airflow 2.11 may run one try twice (two LocalTaskJobs, "Recorded
    # pid ... does not match"): both then wait for the crashed try's lease and run
    # one after the other, which is the lease doing its job, not a second retry.
    retry_log = sorted((e for e in log if e["dag_id"] == "lt_pol_retry"), key=lambda e: e["t"])
    tries = [e for e in retry_log if e["event"] == "start"]
    assert_one_at_a_time(retry_log[1:])  # after the first start, which was killed: no end
    if len(tries) > 2:
        print("Airflow ran one try of lt_pol_retry more than once:", tries[1:])
    assert len(tries) >= 2 and all(t["try_number"] > tries[0]["try_number"] for t in tries[1:]), tries
    assert all(t["token"] > tries[0]["token"] for t in tries[1:]), tries
    assert len({t["token"] for t in tries}) == len(tries), tries
    # The crashed try's keeper gives its lease back once its tree is gone; a retry
    # that asked before that waited for it.
    with connect(f"sqlite://{tmp_path}/leases.db") as store:
        history = store.history("airflow/lt_pol_retry/job", limit=100)
    released = [e for e in history if e.token == tries[0]["token"] and e.kind == "released"]
    waited = (f"an earlier try ({tries[0]['try_number']}) of this task instance still holds "
              "the lease") in logs["lt_pol_retry"]
    print("the crashed try's lease:", "released by its keeper" if released else "",
          "waited for by the retry" if waited else "")
    assert released or waited, history


def unfinished(cluster: Any, dag_id: str, seen: dict[str, list[tuple[str, str, str]]]) -> str:
    """What a timed-out wait last saw: every run, and for each unfinished one
    its task states and what the components logged of it (a bad night's first
    question is which run, stuck where)."""
    lines = [f"last seen: {seen.get(dag_id)}"]
    for run_type, run_id, state in seen.get(dag_id, []):
        if state not in ("success", "failed"):
            try:
                tasks: Any = cluster.task_states(dag_id, run_id)
            except OSError as error:
                tasks = error
            logged = [f"{log.stem}: {line[:300]}" for log in sorted(cluster.logs.glob("*.out"))
                      for line in log.read_text(errors="replace").splitlines() if run_id in line]
            lines.append(f"{run_type} {run_id} {state}: tasks {tasks}; logged: {logged[-12:]}")
    return "\n".join(lines)


def assert_one_at_a_time(log: list[dict[str, Any]]) -> None:
    holder = None
    for event in sorted(log, key=lambda e: e["t"]):
        if event["event"] == "start":
            assert holder is None, f"{event['run_id']} started while {holder} held the lease"
            holder = event["run_id"]
        else:
            assert event["run_id"] == holder
            holder = None

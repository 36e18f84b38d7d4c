"""SLOW (about 4-6 minutes for the file): one lease for a whole DAG run,
through Airflow's real scheduler (LocalExecutor), dag processor, triggerer and
api-server, started once for the module in a temp AIRFLOW_HOME on 127.0.0.1.

- a backfill run and a manual run of a three-task leased DAG overlap: the
  manual run waits deferred, no task of one run overlaps the other's critical
  section, tokens are ordered, and DAGs sharing the key skip their whole run
  or fail it, with a log naming the holder; the first run keeps its lease past its ttl
  while its task waits (the keeper renews from the triggerer);
- the lease broken from outside mid-run: the running task's process is ended
  (fail-stop, exit status 75), the next does not start, the run ends failed;
  broken between two tasks: the next task refuses to start;
- the worker running a task (and the triggerer) SIGKILLed: after the ttl
  another run takes the lease, and the dead run's teardown leaves it alone;
- under a pool of one slot the keeper starts before the work tasks;
- a run whose teardown never runs: the keeper gives the lease back within
  one ttl after the run's last task ended.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import AIRFLOW_2
from scheduler_harness import AirflowCluster, poll
from test_airflow_scheduler import server_db_on_airflow_2

from lease_integrations import LeaseRecord, LeaseStore, connect

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

DAGS = Path(__file__).resolve().parent / "dag_run_lease_dags"
TTL = 20.0  # as in the DAG file
RUN_WAIT = 240.0


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("run-lease-records")


@pytest.fixture(scope="module")
def store_url(records: Path) -> str:
    return f"sqlite://{records}/leases.db"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, records: Path, store_url: str,
            request: pytest.FixtureRequest) -> Iterator[AirflowCluster]:
    home = tmp_path_factory.mktemp("run-lease-airflow-home")
    airflow = AirflowCluster(home, DAGS, {
        "RUN_LEASE_RECORD_DIR": str(records),
        "LEASE_STORE_URL": store_url,
        # A dead triggerer's triggers move to a live one only after this: longer
        # than the ttl, so the crash test's dead run cannot renew in time.
        "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "30",
        **server_db_on_airflow_2(request),
    })
    try:
        airflow.start()
        airflow.api("POST", "/api/v2/pools", {"name": "rl_one", "slots": 1})
        for dag_id in ("rl_rebuild", "rl_rebuild_skip", "rl_rebuild_fail", "rl_broken",
                       "rl_between", "rl_crash", "rl_pool_one", "rl_no_teardown"):
            airflow.wait_dag(dag_id)
        yield airflow
    finally:
        airflow.stop()


@pytest.fixture
def store(store_url: str) -> Iterator[LeaseStore]:
    s = connect(store_url)
    yield s
    s.close()


def events(records: Path) -> list[dict[str, Any]]:
    path = records / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_events(records: Path, run_id: str) -> list[dict[str, Any]]:
    return [e for e in events(records) if e["run_id"] == run_id]


def started(records: Path, run_id: str, task: str) -> bool:
    return any(e["task"] == task and e["event"] == "start" for e in run_events(records, run_id))


def lease_span(store: LeaseStore, key: str, token: int) -> tuple[float, float]:
    """When the store granted and released ``token`` (the store's clock)."""
    history = [e for e in store.history(key, limit=100) if e.token == token]
    acquired = [e.at.timestamp() for e in history if e.kind == "acquired"]
    released = [e.at.timestamp() for e in history if e.kind == "released"]
    assert acquired and released, f"token {token} of {key}: {history}"
    return acquired[0], released[-1]


def current(store: LeaseStore, key: str) -> LeaseRecord:
    record = store.get(key)
    assert record is not None
    return record


def test_backfill_and_manual_run_never_interleave(cluster: AirflowCluster, records: Path,
                                                  store: LeaseStore) -> None:
    key = "rl-index"
    cluster.backfill("rl_rebuild", "2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z",
                     conf={"tag": "a", "gate": {"build": "go-a"}})
    run_a = poll(lambda: next((r["dag_run_id"] for r in cluster.runs("rl_rebuild")
                               if r["run_type"] == "backfill"), None),
                 "the backfill's run", RUN_WAIT)
    poll(lambda: started(records, run_a, "build"), "the backfill run's build to start", RUN_WAIT)
    held = current(store, key)
    token_a = held.token
    assert held.held and held.meta["run_id"] == run_a and held.meta["run_type"] == "backfill"

    # Airflow 2.11 applies the DAG's end_date to manual runs too (their logical
    # date is "now" there; 3.x gives them none): a date inside the DAG's range.
    run_b = cluster.trigger("rl_rebuild", {"tag": "b"},
                            logical_date="2026-01-02T00:00:00+00:00" if AIRFLOW_2 else None)
    run_s = cluster.trigger("rl_rebuild_skip", {"tag": "s"})
    run_f = cluster.trigger("rl_rebuild_fail", {"tag": "f"})
    poll(lambda: cluster.task_states("rl_rebuild", run_b).get("dag_run_lease_acquire")
         == "deferred", "the manual run to wait for the lease, deferred", RUN_WAIT)
    assert cluster.wait_run("rl_rebuild_skip", run_s, RUN_WAIT) == "success"
    skipped = cluster.task_states("rl_rebuild_skip", run_s)
    assert {skipped[t] for t in ("dag_run_lease_acquire", "extract", "build", "swap",
                                 "dag_run_lease_keeper")} == {"skipped"}, skipped
    skip_log = cluster.task_log("rl_rebuild_skip", run_s, "dag_run_lease_acquire")
    assert "skipping the whole run" in skip_log and held.holder in skip_log
    assert f"run_id={run_a}" in skip_log
    assert cluster.wait_run("rl_rebuild_fail", run_f, RUN_WAIT) == "failed"
    failed = cluster.task_states("rl_rebuild_fail", run_f)
    assert failed["dag_run_lease_acquire"] == "failed", failed
    assert {failed[t] for t in ("extract", "build", "swap")} == {"upstream_failed"}, failed
    fail_log = cluster.task_log("rl_rebuild_fail", run_f, "dag_run_lease_acquire")
    assert "failing the whole run" in fail_log and held.holder in fail_log
    assert not run_events(records, run_s) and not run_events(records, run_f)

    # The backfill run's task waits past the ttl: only the keeper's renewals
    # (from the triggerer) can have kept the lease alive this long.
    poll(lambda: (r := current(store, key)).held and r.token == token_a and r.renewed_at
         and r.acquired_at and (r.renewed_at - r.acquired_at).total_seconds() > TTL,
         "the backfill run's lease to outlive its ttl", RUN_WAIT, 1.0)
    assert cluster.task_states("rl_rebuild", run_a)["dag_run_lease_keeper"] == "deferred"
    assert not run_events(records, run_b), "the manual run started work without the lease"

    (records / "go-a").touch()
    assert cluster.wait_run("rl_rebuild", run_a, RUN_WAIT) == "success"
    assert cluster.wait_run("rl_rebuild", run_b, RUN_WAIT) == "success"
    for run in (run_a, run_b):
        assert set(cluster.task_states("rl_rebuild", run).values()) == {"success"}

    ev_a, ev_b = run_events(records, run_a), run_events(records, run_b)
    assert [(e["task"], e["event"]) for e in ev_a] == [(e["task"], e["event"]) for e in ev_b] == [
        ("extract", "start"), ("extract", "end"), ("build", "start"), ("build", "end"),
        ("swap", "start"), ("swap", "end")]
    token_b = ev_b[0]["token"]
    assert {e["token"] for e in ev_a} == {token_a} and {e["token"] for e in ev_b} == {token_b}
    assert token_b > token_a
    # Each run's work lies inside its own lease, and the leases do not overlap.
    acq_a, rel_a = lease_span(store, key, token_a)
    acq_b, rel_b = lease_span(store, key, token_b)
    assert acq_a <= min(e["at"] for e in ev_a) and max(e["at"] for e in ev_a) <= rel_a
    assert rel_a <= acq_b
    assert acq_b <= min(e["at"] for e in ev_b) and max(e["at"] for e in ev_b) <= rel_b
    assert current(store, key).holder is None


def test_lease_broken_mid_run_fails_the_run(cluster: AirflowCluster, records: Path,
                                            store: LeaseStore) -> None:
    key = "rl-broken"
    run = cluster.trigger("rl_broken", {"tag": "x", "gate": {"build": "go-never"}})
    between = cluster.trigger("rl_between", {"tag": "between"})
    poll(lambda: started(records, run, "build"), "build to start", RUN_WAIT)
    before = store.force_release(key, by="test-operator")
    assert before is not None and before.meta["run_id"] == run

    # Between tasks: broken while only the unguarded pause runs; the next
    # guarded task checks the record at its start and refuses to run.
    poll((records / "between-pause.started").exists, "rl_between's pause to start", RUN_WAIT)
    assert store.force_release("rl-between", by="test-operator") is not None
    (records / "go-between").touch()
    assert cluster.wait_run("rl_between", between, RUN_WAIT) == "failed"
    states = cluster.task_states("rl_between", between)
    assert states["pause"] == "success" and states["after"] == "failed", states
    assert states["dag_run_lease_keeper"] == "failed"
    assert not run_events(records, between), "a guarded task started without the lease"
    after_log = cluster.task_log("rl_between", between, "after")
    assert "not starting: the run's lease rl-between" in after_log and "LeaseLost" in after_log

    assert cluster.wait_run("rl_broken", run, RUN_WAIT) == "failed"
    states = cluster.task_states("rl_broken", run)
    assert states["extract"] == "success"
    assert states["build"] == "failed"  # its process ended while it waited at its gate
    assert states["swap"] == "upstream_failed"
    assert states["dag_run_lease_keeper"] == "failed"
    assert states["dag_run_lease_release"] == "success"
    assert not started(records, run, "swap")
    assert not any(e["task"] == "build" and e["event"] == "end" for e in run_events(records, run))
    build_log = cluster.task_log("rl_broken", run, "build")
    assert "stopping this process and everything it started (exit status 75)" in build_log
    assert not any(e["event"].startswith("swallowed") for e in run_events(records, run))
    keeper_log = cluster.keeper_log("rl_broken", run)
    assert "broken from outside by test-operator" in keeper_log
    release_log = cluster.task_log("rl_broken", run, "dag_run_lease_release")
    assert "no longer this run's" in release_log


def test_sigkilled_worker_lease_expires_and_dead_teardown_leaves_it(
        cluster: AirflowCluster, records: Path, store: LeaseStore) -> None:
    key = "rl-crash"
    run_a = cluster.trigger("rl_crash", {"tag": "crash-a", "gate": {"build": "go-never"}})
    pid_file = records / "crash-a-build.pid"
    poll(pid_file.exists, "the doomed task's pid file", RUN_WAIT)
    task_pid, worker_pid = (int(p) for p in pid_file.read_text().split())
    held = current(store, key)
    assert held.held and held.meta["run_id"] == run_a
    assert worker_pid not in cluster.started_pids() and task_pid not in cluster.started_pids()

    # The host dies: the triggerer (the keeper's renewals) and the worker
    # (supervisor and task). A new triggerer comes up at once; it cannot adopt
    # the dead one's trigger before its health threshold (30 s) > ttl.
    cluster.kill_component("triggerer")
    cluster.kill_below(worker_pid, task_pid)
    cluster.start_component("triggerer")

    run_b = cluster.trigger("rl_crash", {"tag": "crash-b", "gate": {"build": "go-b"}})
    poll(lambda: started(records, run_b, "build"), "the next run to get the lease and work",
         RUN_WAIT)
    record_b = current(store, key)
    assert record_b.token > held.token and record_b.meta["run_id"] == run_b
    # The dead run's lease was either left to expire, or released by its own
    # teardown while it still held it (Airflow may notice the dead worker and run
    # the teardown before the ttl): never released or broken after run B got it.
    b_granted = next(e.at for e in store.history(key, limit=100)
                     if e.kind == "acquired" and e.token == record_b.token)

    def late_releases_of_the_dead_token() -> list[object]:
        return [e for e in store.history(key, limit=100) if e.token == held.token
                and e.kind in ("released", "broken") and e.at >= b_granted]

    assert not late_releases_of_the_dead_token()
    released_in_time = any(e.token == held.token and e.kind == "released"
                           for e in store.history(key, limit=100))

    # The dead run ends failed; its teardown runs but leaves run B's lease alone.
    assert cluster.wait_run("rl_crash", run_a, RUN_WAIT) == "failed"
    states_a = cluster.task_states("rl_crash", run_a)
    assert states_a["build"] == "failed" and states_a["swap"] == "upstream_failed"
    assert states_a["dag_run_lease_release"] == "success"
    release_log = cluster.task_log("rl_crash", run_a, "dag_run_lease_release")
    if released_in_time:
        assert f"released run lease {key} (token {held.token})" in release_log
    else:
        assert "no longer this run's" in release_log
    after = current(store, key)
    assert after.held and after.holder == record_b.holder and after.token == record_b.token
    assert not late_releases_of_the_dead_token()

    (records / "go-b").touch()
    assert cluster.wait_run("rl_crash", run_b, RUN_WAIT) == "success"
    assert current(store, key).holder is None


def start_dates(cluster: AirflowCluster, dag_id: str, run_id: str) -> dict[str, str]:
    tis = cluster.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances?limit=100")
    return {ti["task_id"]: ti["start_date"] for ti in tis["task_instances"]}


def test_under_a_pool_of_one_slot_the_keeper_starts_before_the_work(
        cluster: AirflowCluster) -> None:
    run = cluster.trigger("rl_pool_one", {"tag": "pool"})
    assert cluster.wait_run("rl_pool_one", run, RUN_WAIT) == "success"
    started_at = start_dates(cluster, "rl_pool_one", run)
    assert started_at["dag_run_lease_keeper"] < started_at["extract"], started_at


def test_a_run_whose_teardown_never_runs_frees_its_lease_within_a_ttl(
        cluster: AirflowCluster, records: Path, store: LeaseStore) -> None:
    key = "rl-no-teardown"
    run = cluster.trigger("rl_no_teardown", {"tag": "no-teardown", "gate": {"swap": "go-nt"}})
    poll(lambda: started(records, run, "swap"), "swap to start", RUN_WAIT)
    token = current(store, key).token
    cluster.api("PATCH", f"/api/v2/dags/rl_no_teardown/dagRuns/{run}/taskInstances/"
                "dag_run_lease_release", {"new_state": "success"})
    (records / "go-nt").touch()
    assert cluster.wait_run("rl_no_teardown", run, RUN_WAIT) == "success"
    ended = max(e["at"] for e in run_events(records, run))
    released = [e for e in store.history(key, limit=100)
                if e.token == token and e.kind == "released"]
    assert released and released[0].at.timestamp() <= ended + TTL, (released, ended)
    assert current(store, key).holder is None
    keeper_log = cluster.keeper_log("rl_no_teardown", run)
    assert "released by the keeper" in keeper_log


def test_a_successful_run_ends_its_lease_as_a_normal_end(
        cluster: AirflowCluster, store: LeaseStore) -> None:
    """The teardown (a worker) releases while the keeper (the triggerer) keeps
    renewing: the keeper's next renewal is refused. That is the run's normal
    end: its history is a grant and a release (no ``lost`` after it) and no
    log says the lease was lost, neither the keeper's task log nor the
    triggerer's own."""
    key = "rl-pool-one"
    before = store.get(key)
    run = cluster.trigger("rl_pool_one", {"tag": "normal-end"})
    assert cluster.wait_run("rl_pool_one", run, RUN_WAIT) == "success"
    record = current(store, key)
    assert record.holder is None and record.meta["run_id"] == run
    assert before is None or record.token > before.token
    # Past the keeper's last renewal (every ttl/3): a refusal has happened by now.
    poll(lambda: cluster.task_states("rl_pool_one", run)["dag_run_lease_keeper"] == "success",
         "the keeper to end with success", RUN_WAIT)
    time.sleep(TTL / 3 + 2)
    kinds = [e.kind for e in store.history(key, limit=100) if e.token == record.token]
    assert kinds == ["acquired", "released"], kinds
    keeper_log = cluster.keeper_log("rl_pool_one", run)
    assert "gave it back" in keeper_log or "released by the keeper" in keeper_log, keeper_log
    lost_line = f"lease {key} lost (token {record.token}"
    assert lost_line not in keeper_log
    assert lost_line not in cluster.tail("triggerer", 100_000)

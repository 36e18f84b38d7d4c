"""Fail-stop through Airflow (issue 23, table 1's Airflow rows): a lease broken
from outside (``force_release``, as ``leasectl break`` does) while the task
works ends the task's process and every process it started, and the try is
never a success.

- ``LeasedPythonOperator`` whose callable starts a child (in a session of its
  own, with a grandchild) and waits: under ``dag.test()`` (the task runs in the
  process that called it, which exits with ``LEASE_LOST_EXIT_STATUS``) and
  under the real scheduler (the supervisor sees status 75: the try failed);
- ``BashOperator`` (``sleep 60`` in bash) inside ``dag_run_lease(...)``, under
  the real scheduler: bash and its children are gone, the run fails, the
  keeper fails and the triggerer that ran it lives on; the same with a daemon
  that bash started with ``setsid`` (orphaned to init by ``on_kill``, frozen
  by the pid the ladder saw at its start);
- the trust-window case under ``dag.test()``: the Redis store blackholed by a
  proxy while worker threads and children work and a contender keeps trying
  (straight to Redis): all the work, and the operator's ``on_kill()``, ends
  before the contender's grant, by the store's history.

Under the old in-thread interrupt the callable's child and bash ran on
(40 s in issue 23). Each test prints the time from the loss being known (the
lease's ``on_lost`` callback ran, ``failstop_dags.py``) to the last sign of
work and to the moment every process of the job was gone.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from scheduler_harness import EXIT_75_LOGGED, AirflowCluster, poll
from test_airflow_scheduler import server_db_on_airflow_2

from lease_integrations import LEASE_LOST_EXIT_STATUS, LeaseBusy, LeaseLock, LeaseStore, connect
from lease_integrations.keeper.descendants import descendants

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "safety"))
from proxy import FaultProxy  # tests/safety/proxy.py

#: (pid, start time in clock ticks): a process's identity, safe from pid reuse.
Process = tuple[int, int]
DAGS = Path(__file__).resolve().parent / "failstop_dags"
TTL, HEARTBEAT = 20.0, 2.0  # as in the DAG file
GRACE = TTL / 5 / 4
BOUND = HEARTBEAT + GRACE  # issue 23: gone within one heartbeat plus the grace
RUN_WAIT = 240.0


# -- evidence ----------------------------------------------------------------------------
def _stat(pid: int) -> tuple[str, int] | None:
    """(state, start time in ticks since boot) of a process, None if gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[19])


def identify(pids: list[int]) -> set[Process]:
    """(pid, start time) of each pid and of everything below it, now."""
    found: set[Process] = set()
    for pid in [*pids, *descendants(*pids)]:
        stat = _stat(pid)
        if stat is not None and stat[0] not in "ZX":
            found.add((pid, stat[1]))
    return found


def alive(process: Process) -> bool:
    """Running, not a zombie, and not a reused pid."""
    stat = _stat(process[0])
    return stat is not None and stat[1] == process[1] and stat[0] not in "ZX"


def last_tick(directory: Path) -> float:
    lines = (directory / "ticks").read_text().splitlines()
    return max(float(line.split()[0]) for line in lines if line.strip())


def wait_gone(processes: set[Process], timeout: float) -> float:
    """Poll until none of ``processes`` runs; when that was first seen."""
    deadline = time.monotonic() + timeout
    while any(alive(p) for p in processes):
        assert time.monotonic() < deadline, [p for p in processes if alive(p)]
        time.sleep(0.01)
    return time.time()


def judge(what: str, directory: Path, broken_at: float, gone_at: float) -> None:
    """Print and check the timing: every sign of work within the bound after
    the loss was known, and every process gone within it too."""
    lost_at = float((directory / "lost").read_text())
    last = last_tick(directory)
    print(f"\n{what}: loss known {lost_at - broken_at:+.3f} s after the break; last work "
          f"{last - lost_at:+.3f} s, every process gone {gone_at - lost_at:+.3f} s after "
          f"the loss was known (bound {BOUND:g} s)")
    assert last <= lost_at + BOUND, (last - lost_at)
    assert gone_at <= lost_at + BOUND, (gone_at - lost_at)
    time.sleep(0.2)
    assert last_tick(directory) == last, "work went on after its processes were gone"
    assert not (directory / "ended").exists(), (
        "the task's work went on: its wait returned (its child had ended) while its process ran")


def kill_left(processes: set[Process]) -> None:
    for process in processes:
        if alive(process):
            os.kill(process[0], 9)


# -- dag.test() ----------------------------------------------------------------------------
def start_dag_test(dag_id: str, airflow_home: Path, tmp_path: Path,
                   store_url: str) -> tuple[subprocess.Popen[bytes], Path, set[Process]]:
    """``dag_id``'s ``dag.test()`` in a process of its own; returns once its
    work runs, with the evidence directory and the processes the task started."""
    records = tmp_path / "records"
    script = f"import runpy\nrunpy.run_path({str(DAGS / 'failstop_dags.py')!r})[{dag_id!r}].test()\n"
    env = {**os.environ, "LEASE_STORE_URL": store_url, "FAILSTOP_RECORD_DIR": str(records),
           "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS)}
    directory = records / "dagtest"
    with open(tmp_path / "run.log", "wb") as out:
        run = subprocess.Popen([sys.executable, "-c", script], env=env, cwd=str(airflow_home),
                               stdout=out, stderr=subprocess.STDOUT)

    def working() -> bool:
        assert run.poll() is None, (tmp_path / "run.log").read_text(errors="replace")[-3000:]
        return (directory / "pids").exists()

    try:
        poll(working, "the callable's child and grandchild to work", 180, 0.05)
    except BaseException:
        run.kill()
        run.wait()
        raise
    processes = identify([int(p) for p in (directory / "pids").read_text().split()])
    assert len(processes) >= 2, processes
    return run, directory, processes


def not_a_success(airflow_home: Path, dag_id: str) -> None:
    """dag.test() never got to record an outcome: the try is not a success."""
    with sqlite3.connect(airflow_home / "airflow.db") as db:
        states = {s for (s,) in db.execute(
            "SELECT state FROM task_instance WHERE dag_id = ?", (dag_id,))}
    assert states and "success" not in states, states


@pytest.mark.timeout(300)
def test_dag_test_leased_callable_child_ends_with_the_process(airflow_home: Path,
                                                               tmp_path: Path) -> None:
    store_url = f"sqlite://{tmp_path}/leases.db"
    run, directory, processes = start_dag_test("lf_child", airflow_home, tmp_path, store_url)
    try:
        with connect(store_url) as store:
            broken_at = time.time()
            before = store.force_release("airflow/lf_child/job", by="test operator")
            assert before is not None and before.held
        gone_at = wait_gone(processes, 3 * TTL)
        status = run.wait(3 * TTL)
        log = (tmp_path / "run.log").read_text(errors="replace")
        assert status == LEASE_LOST_EXIT_STATUS, log[-3000:]
        judge("dag.test(), LeasedPythonOperator child", directory, broken_at, gone_at)
        assert "stopping this process and everything it started (exit status 75)" in log
        not_a_success(airflow_home, "lf_child")
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        kill_left(processes)


@pytest.mark.timeout(300)
def test_dag_test_keeper_killed_ends_the_callables_sessions(airflow_home: Path,
                                                             tmp_path: Path) -> None:
    """The task's keeper SIGKILLed (the OOM killer) while the callable's
    child and grandchild, each in a session of its own (out of reach of a
    signal to the task's group), work: the kernel ends the task and both
    within moments, long before the ttl could let anyone else in. Before,
    the task died and both worked on past the next grant."""
    from tests.keeper.keeper_observe import armed_readers, keeper_of

    store_url = f"sqlite://{tmp_path}/leases.db"
    run, directory, processes = start_dag_test("lf_child", airflow_home, tmp_path, store_url)
    try:
        keeper = keeper_of(run.pid)
        # The task looks below itself every quarter second: each session is
        # given death-pipe read ends once seen (armed: O_ASYNC).
        poll(lambda: armed_readers(run.pid) >= 2 + 2 * len(processes),
             "the task to see its child's and grandchild's sessions", 30, 0.01)
        killed_at = time.time()
        os.kill(keeper[0], 9)
        gone_at = wait_gone(processes | identify([run.pid]), TTL / 2)
        last = last_tick(directory)
        print(f"\nkeeper SIGKILLed: every process gone {gone_at - killed_at:+.3f} s after, "
              f"last work {last - killed_at:+.3f} s after (ttl {TTL:g} s)")
        assert run.wait(10) == -9
        not_a_success(airflow_home, "lf_child")
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        kill_left(processes)


@pytest.mark.timeout(300)
def test_dag_test_blackholed_store_stops_all_work_before_the_contenders_grant(
        airflow_home: Path, tmp_path: Path, redis_url: str) -> None:
    key, ttl = "airflow/lf_blackout/job", 3.0  # heartbeat 1 s, margin 0.6 s, grace 0.15 s
    target = urlsplit(redis_url)
    assert target.hostname is not None and target.port is not None
    proxy = FaultProxy(target.hostname, target.port)
    through = urlunsplit(target._replace(netloc=target.netloc.replace(
        f":{target.port}", f":{proxy.port}")))
    run, directory, processes = start_dag_test("lf_blackout", airflow_home, tmp_path, through)
    direct = connect(redis_url)
    try:
        proxy.blackhole()  # the job's store stops answering; the contender's does not
        gone = ThreadPoolExecutor(1).submit(wait_gone, processes, 3 * ttl)
        contender = LeaseLock(direct, key, ttl=ttl)
        deadline = time.monotonic() + 10 * ttl
        while True:
            try:
                lease = contender.acquire(wait=0)
                break
            except LeaseBusy:
                assert time.monotonic() < deadline, "the contender never got the lease"
                time.sleep(0.005)
        granted = next(e.at.timestamp() for e in direct.history(key, limit=20)
                       if e.kind == "acquired" and e.token == lease.token)
        contender.release(lease)
        gone_at = gone.result()
        status = run.wait(3 * ttl)
        log = (tmp_path / "run.log").read_text(errors="replace")
        assert status == LEASE_LOST_EXIT_STATUS, log[-3000:]
        lost_at = float((directory / "lost").read_text())
        last = last_tick(directory)
        on_kill = float((directory / "on_kill").read_text())
        print(f"\ndag.test(), trust window (Redis blackholed): last work {last - lost_at:+.3f} s "
              f"after the loss was known, {granted - last:.3f} s before the contender's grant; "
              f"on_kill {granted - on_kill:.3f} s before it; every process gone "
              f"{gone_at - lost_at:+.3f} s after the loss was known, {granted - gone_at:.3f} s "
              "before the grant")
        assert last < granted and on_kill < granted, (last, on_kill, granted)
        assert {"thread0", "thread1", "child0", "child1"} <= {
            line.split()[1] for line in (directory / "ticks").read_text().splitlines()}
        assert gone_at <= lost_at + ttl / 3 + ttl / 5 / 4, gone_at - lost_at
        assert not (directory / "ended").exists(), (
            "the task's work went on: its wait returned (its child had ended) while its process ran")
        assert "no successful renewal within the trust window" in log, log[-3000:]
        not_a_success(airflow_home, "lf_blackout")
    finally:
        proxy.close()
        direct.close()
        if run.poll() is None:
            run.kill()
            run.wait()
        kill_left(processes)


# -- the real scheduler -----------------------------------------------------------------
@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("failstop-records")


@pytest.fixture(scope="module")
def store_url(records: Path) -> str:
    return f"sqlite://{records}/leases.db"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, records: Path, store_url: str,
            request: pytest.FixtureRequest) -> Iterator[AirflowCluster]:
    airflow = AirflowCluster(tmp_path_factory.mktemp("failstop-airflow-home"), DAGS, {
        "FAILSTOP_RECORD_DIR": str(records), "LEASE_STORE_URL": store_url,
        **server_db_on_airflow_2(request)})
    try:
        airflow.start()
        for dag_id in ("lf_child", "lf_bash", "lf_bash_daemon"):
            airflow.wait_dag(dag_id)
        yield airflow
    finally:
        airflow.stop()


@pytest.fixture
def store(store_url: str) -> Iterator[LeaseStore]:
    s = connect(store_url)
    yield s
    s.close()


def bash_under_a_broken_run_lease(cluster: AirflowCluster, records: Path, store: LeaseStore,
                                  dag_id: str, key: str, tag: str, least: int) -> None:
    directory = records / tag
    run = cluster.trigger(dag_id, {"tag": tag})
    processes: set[Process] = set()
    try:
        poll((directory / "pids").exists, "bash and the processes it starts to run", RUN_WAIT)
        processes = identify([int(p) for p in (directory / "pids").read_text().split()])
        assert len(processes) >= least, processes
        broken_at = time.time()
        before = store.force_release(key, by="test-operator")
        assert before is not None and before.meta["run_id"] == run
        gone_at = wait_gone(processes, BOUND + 10)
        assert cluster.wait_run(dag_id, run, RUN_WAIT) == "failed"
        judge(f"scheduler, BashOperator in dag_run_lease ({dag_id})", directory, broken_at,
              gone_at)
    finally:
        kill_left(processes)
    states = cluster.task_states(dag_id, run)
    assert states["bash"] == "failed", states
    assert states["dag_run_lease_keeper"] == "failed", states
    assert states["dag_run_lease_release"] == "success", states
    log = cluster.task_log(dag_id, run, "bash")
    assert "stopping this process and everything it started (exit status 75)" in log, log[-3000:]
    # The ladder ran to its end: on_kill() ended bash, whose end let execute()
    # return, yet the task process still exited with the ladder's status.
    assert EXIT_75_LOGGED in log, log[-3000:]
    keeper_log = cluster.keeper_log(dag_id, run)
    assert "broken from outside by test-operator" in keeper_log
    # The keeper's loss failed the keeper task only: the triggerer serves on.
    assert cluster.procs["triggerer"].poll() is None
    assert cluster.triggerer_healthy()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_scheduler_bash_in_dag_run_lease_ends_and_the_run_fails(
        cluster: AirflowCluster, records: Path, store: LeaseStore) -> None:
    bash_under_a_broken_run_lease(cluster, records, store, "lf_bash", "lf-bash", "bash", 2)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_scheduler_bash_daemon_in_its_own_session_ends_too(
        cluster: AirflowCluster, records: Path, store: LeaseStore) -> None:
    bash_under_a_broken_run_lease(cluster, records, store, "lf_bash_daemon", "lf-bash-daemon",
                                  "daemon", 3)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_scheduler_leased_callable_child_ends_and_the_try_fails(
        cluster: AirflowCluster, records: Path, store: LeaseStore) -> None:
    directory = records / "child"
    run = cluster.trigger("lf_child", {"tag": "child"})
    processes: set[Process] = set()
    try:
        poll((directory / "pids").exists, "the callable's child and grandchild to work",
             RUN_WAIT)
        processes = identify([int(p) for p in (directory / "pids").read_text().split()])
        assert len(processes) >= 2, processes
        broken_at = time.time()
        before = store.force_release("airflow/lf_child/job", by="test-operator")
        assert before is not None and before.meta["run_id"] == run
        gone_at = wait_gone(processes, BOUND + 10)
        assert cluster.wait_run("lf_child", run, RUN_WAIT) == "failed"
        judge("scheduler, LeasedPythonOperator child", directory, broken_at, gone_at)
    finally:
        kill_left(processes)
    assert cluster.task_states("lf_child", run)["job"] == "failed"
    log = cluster.task_log("lf_child", run, "job")
    assert "stopping this process and everything it started (exit status 75)" in log, log[-3000:]
    assert EXIT_75_LOGGED in log, log[-3000:]

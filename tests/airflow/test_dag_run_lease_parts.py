"""The DAG-run lease without a scheduler (fast): how the DAG is wired at parse
time, bad arguments failing the import, and the keeper's trigger run on a
real SQLite store (its ``run()`` is an ordinary async generator)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import sqlite3
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from harness import AIRFLOW_2, dag_bag_class

try:  # Airflow 3
    from airflow.sdk import DAG, task
except ImportError:  # Airflow 2.11
    from airflow import DAG
    from airflow.decorators import task
from airflow.triggers.base import TaskFailedEvent, TaskSuccessEvent

from lease_integrations import ConfigurationError, LeaseStore, connect
from lease_integrations.airflow.dag_run_lease import dag_run_lease, with_dag_run_lease
from lease_integrations.airflow.keeper_trigger import DagRunLeaseKeeperTrigger
from lease_integrations.airflow.run_lease import DagRunLease, acquire_for_run, run_secret


def rule_name(rule: Any) -> str:
    """A weight rule's name: Airflow 2.11 keeps the rule's strategy object."""
    if isinstance(rule, str):
        return rule
    from airflow.task.priority_strategy import airflow_priority_weight_strategies

    return next(name for name, cls in airflow_priority_weight_strategies.items()
                if type(rule) is cls)


@pytest.fixture(autouse=AIRFLOW_2)
def _metadata_db(request: pytest.FixtureRequest) -> None:
    """Airflow 2.11's keeper reads its run's state from the metadata DB (its
    triggerer has one): the keepers here need a migrated DB, which has no row
    for their made-up runs, so they keep their lease until it ends, as on 3.x."""
    request.getfixturevalue("airflow_home")


def _dag(dag_id: str) -> DAG:
    return DAG(dag_id=dag_id, schedule=None, start_date=datetime(2026, 1, 1))


@task
def step() -> None:
    pass


def test_block_wraps_its_tasks_with_setup_keeper_and_teardown() -> None:
    with _dag("wired") as dag:
        outside = step.override(task_id="outside")()
        with dag_run_lease(lease_key="k", lease_ttl=30) as lease:
            a = step.override(task_id="a")()
            b = step.override(task_id="b")()
            c = step.override(task_id="c")()
            a >> b >> c
    tasks = dag.task_dict
    assert lease.acquire.is_setup and lease.release.is_teardown
    assert tasks["a"].upstream_task_ids == {"dag_run_lease_acquire"}
    assert tasks["b"].upstream_task_ids == {"a"}
    assert tasks["dag_run_lease_release"].upstream_task_ids == {"dag_run_lease_acquire", "c"}
    assert tasks["dag_run_lease_keeper"].upstream_task_ids == {"dag_run_lease_acquire"}
    # The keeper must not feed the teardown (it ends when the teardown releases).
    # Scheduled first: a keeper behind the work would start when the ttl runs out.
    for task_id in ("dag_run_lease_acquire", "dag_run_lease_keeper"):
        assert rule_name(tasks[task_id].weight_rule) == "absolute"
        assert tasks[task_id].priority_weight > len(tasks)
    assert not tasks["dag_run_lease_keeper"].downstream_task_ids
    for task_id in "abc":
        assert tasks[task_id]._pre_execute_hook is not None
        assert tasks[task_id]._post_execute_hook is not None
    assert tasks["outside"]._pre_execute_hook is None
    assert not outside.operator.upstream_task_ids


def test_existing_tasks_and_a_prefix() -> None:
    with _dag("existing") as dag:
        x = step.override(task_id="x")()
        y = step.override(task_id="y")()
        lease = with_dag_run_lease([x, y], lease_key="k2", task_prefix="index_lease")
    assert lease.acquire.task_id == "index_lease_acquire"
    assert dag.task_dict["x"].upstream_task_ids == {"index_lease_acquire"}
    assert dag.task_dict["y"].downstream_task_ids == {"index_lease_release"}


@pytest.mark.parametrize(("kwargs", "named"), [
    ({"on_busy": "wiat"}, "'wiat'"),
    ({"lease_ttl": 0}, "ttl"),
    ({"lease_conn_id": ""}, "lease_conn_id"),
    ({"deferrable": True}, "deferrable"),
    ({"task_prefix": " "}, "task_prefix"),
])
def test_bad_arguments_fail_the_dag_file(kwargs: dict[str, Any], named: str) -> None:
    with _dag("bad"), pytest.raises(ConfigurationError, match=named), dag_run_lease(**kwargs):
        step()


def test_an_empty_block_is_an_error() -> None:
    with _dag("empty"), pytest.raises(ConfigurationError, match="guards no tasks"), dag_run_lease():
        pass


def test_outside_a_dag_is_an_error() -> None:
    with pytest.raises(ConfigurationError, match="inside a DAG"), dag_run_lease():
        pass


# -- the keeper's trigger on a real store ------------------------------------------------------
def granted_run_lease(store: LeaseStore, key: str, ttl: float = 2.0, run_id: str = "r1",
                      url: str | None = None) -> DagRunLease:
    """A lease taken as the acquire task takes it, as the run's XCom describes it."""
    nonce = secrets.token_hex(8)
    granted = acquire_for_run(store, key, f"dagrun:d:{run_id}",
                              run_secret(key, "d", run_id, nonce), ttl, {"dag_id": "d"})
    assert granted.granted and granted.record is not None
    return DagRunLease(key=key, token=granted.record.token, ttl=ttl, heartbeat=ttl / 4,
                       conn_id="lease_default", dag_id="d", run_id=run_id, nonce=nonce,
                       store_url=url)


def _trigger(url: str, store: LeaseStore, key: str, ttl: float = 2.0) -> DagRunLeaseKeeperTrigger:
    info = granted_run_lease(store, key, ttl, url=url)
    return DagRunLeaseKeeperTrigger(lease=info.to_xcom(), keeper_task_id="dag_run_lease_keeper")


def release_as_the_run(store: LeaseStore, trigger: DagRunLeaseKeeperTrigger) -> bool:
    """What the teardown does: adopt the run's lease and give it back."""
    info = DagRunLease.from_xcom(trigger.lease)
    lock = info.lock(store)
    return lock.release(lock.adopt(info.token, info.secret()))


async def _first_event(trigger: DagRunLeaseKeeperTrigger) -> dict[str, Any]:
    """The trigger's one event (it ends the keeper task itself), with its outcome."""
    async for event in trigger.run():
        assert trigger.outcome is not None
        status, reason = trigger.outcome
        expected = TaskSuccessEvent if status == "released" else TaskFailedEvent
        assert isinstance(event, expected), (event, trigger.outcome)
        return {"status": status, "reason": reason}
    raise AssertionError("the trigger ended without an event")


async def _when(store: LeaseStore, key: str, renewed_past: float) -> None:
    """Until the store shows the lease renewed ``renewed_past`` s after acquisition."""
    deadline = asyncio.get_running_loop().time() + 30
    while asyncio.get_running_loop().time() < deadline:
        record = await asyncio.to_thread(store.get, key)
        assert record is not None and record.renewed_at and record.acquired_at
        if (record.renewed_at - record.acquired_at).total_seconds() > renewed_past:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the keeper did not renew")


def test_keeper_renews_past_the_ttl_then_ends_on_our_release(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}/leases.db"
    with connect(url) as store:
        trigger = _trigger(url, store, "keep")

        async def scenario() -> dict[str, Any]:
            running = asyncio.ensure_future(_first_event(trigger))
            await _when(store, "keep", renewed_past=2.0)  # longer than the ttl
            assert not running.done()
            assert await asyncio.to_thread(release_as_the_run, store, trigger)
            return await asyncio.wait_for(running, 30)

        event = asyncio.run(scenario())
    assert event == {"status": "released", "reason": "the run's release task gave it back"}


def test_the_runs_own_release_is_a_normal_end_not_a_loss(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The teardown releases while the keeper keeps renewing (they are two
    processes; the keeper's next renewal is refused): the keeper ends with
    success, no WARNING says the lease was lost, and the history ends with
    the release, no ``lost`` after it."""
    url = f"sqlite://{tmp_path}/leases.db"
    with connect(url) as store:
        trigger = _trigger(url, store, "normal-end")
        token = DagRunLease.from_xcom(trigger.lease).token

        async def scenario() -> dict[str, Any]:
            running = asyncio.ensure_future(_first_event(trigger))
            await _when(store, "normal-end", renewed_past=0.6)
            assert await asyncio.to_thread(release_as_the_run, store, trigger)
            # Past the keeper's next renewal (every ttl/4 = 0.5 s), refused.
            await asyncio.sleep(1.5)
            return await asyncio.wait_for(running, 30)

        with caplog.at_level(logging.INFO):
            event = asyncio.run(scenario())
        kinds = [e.kind for e in store.history("normal-end") if e.token == token]
    assert event == {"status": "released", "reason": "the run's release task gave it back"}
    assert kinds == ["acquired", "released"], kinds
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not warnings, warnings


def test_keeper_reports_a_break_from_outside_as_lost(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}/leases.db"
    with connect(url) as store:
        trigger = _trigger(url, store, "broken")

        async def scenario() -> dict[str, Any]:
            running = asyncio.ensure_future(_first_event(trigger))
            await _when(store, "broken", renewed_past=0.0)
            await asyncio.to_thread(store.force_release, "broken", "ops-person")
            return await asyncio.wait_for(running, 30)

        event = asyncio.run(scenario())
    assert event["status"] == "lost" and "broken from outside by ops-person" in event["reason"]


def test_keeper_reports_a_takeover_as_lost(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}/leases.db"
    with connect(url) as store:
        # The run's lease expired before its keeper ran (a long queue, a dead
        # triggerer) and another run took it: the keeper must not call that "released".
        trigger = _trigger(url, store, "taken", ttl=0.5)
        token = DagRunLease.from_xcom(trigger.lease).token
        deadline = time.monotonic() + 30
        while (record := store.get("taken")) is not None and record.held:
            assert time.monotonic() < deadline, "the lease never expired"
            time.sleep(0.02)
        taken = granted_run_lease(store, "taken", 30.0, run_id="other")
        assert taken.token > token
        event = asyncio.run(asyncio.wait_for(_first_event(trigger), 30))
        assert event["status"] == "lost"
        assert event["reason"].startswith(f"taken over with token {taken.token} by ")
        record = store.get("taken")
        assert record is not None and record.token == taken.token and record.held


def test_keeper_gives_up_when_the_store_stays_unreachable(tmp_path: Path) -> None:
    """A real fault: another connection holds the SQLite file's write lock, so
    every renewal times out; past the trust window the keeper reports the loss."""
    path = tmp_path / "leases.db"
    url = f"sqlite://{path}?timeout=0.2"
    with connect(url) as store:
        trigger = _trigger(url, store, "down", ttl=2.0)
    blocker = sqlite3.connect(path, isolation_level=None)
    try:
        blocker.execute("BEGIN EXCLUSIVE")
        event = asyncio.run(asyncio.wait_for(_first_event(trigger), 30))
    finally:
        blocker.close()
    assert event["status"] == "lost"
    assert "trust window" in event["reason"]


def test_the_example_dag_imports_and_guards_its_three_tasks() -> None:
    DagBag = dag_bag_class()

    example = Path(__file__).resolve().parents[2] / "example_dags" / "index_rebuild_dag_run_lease.py"
    bag = DagBag(dag_folder=str(example))
    assert bag.import_errors == {}
    dag = bag.dags["index_rebuild_dag_run_lease"]
    assert set(dag.task_dict) == {"extract", "build", "swap", "dag_run_lease_acquire",
                                  "dag_run_lease_keeper", "dag_run_lease_release"}
    assert dag.task_dict["extract"].upstream_task_ids == {"dag_run_lease_acquire"}
    assert "swap" in dag.task_dict["dag_run_lease_release"].upstream_task_ids
    assert all(dag.task_dict[t]._pre_execute_hook is not None for t in ("extract", "build", "swap"))


def test_the_example_dag_runs_under_dag_test(airflow_home: Path, tmp_path: Path) -> None:
    """``dag.test()`` runs triggers inline: the keeper must not block the run it keeps."""
    example = Path(__file__).resolve().parents[2] / "example_dags" / "index_rebuild_dag_run_lease.py"
    script = ("import json, runpy, sys\n"
              f"dag = runpy.run_path({str(example)!r})['dag']\n"
              "dr = dag.test()\n"
              "print('RESULT ' + json.dumps({t.task_id: str(getattr(t.state, 'value', t.state))"
              " for t in dr.get_task_instances()}))\n")
    env = {**os.environ, "LEASE_STORE_URL": f"sqlite://{tmp_path}/leases.db",
           "INDEX_REBUILD_DIR": str(tmp_path / "work"),
           "AIRFLOW__CORE__DAGS_FOLDER": str(example.parent)}  # dag.test() syncs the DAG from there
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                          timeout=240, cwd=str(airflow_home))
    result = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert result, done.stdout[-3000:] + done.stderr[-3000:]
    states = json.loads(result[-1][len("RESULT "):])
    assert set(states.values()) == {"success"}, states
    with connect(f"sqlite://{tmp_path}/leases.db") as store:
        record = store.get("search-index")
        assert record is not None and record.holder is None and record.token >= 1
        assert record.meta["dag_id"] == "index_rebuild_dag_run_lease"
    with sqlite3.connect(tmp_path / "work" / "catalog.db") as conn:  # named by the run's token
        assert conn.execute("SELECT path FROM live").fetchone() == (
            str(tmp_path / "work" / f"index-{record.token}.json"),)


# -- many keepers in one loop, as the triggerer runs them ---------------------------------------
KEEPERS = 200


@pytest.mark.parametrize("kind", ["redis", "postgres"])
def test_200_keepers_in_one_loop_lose_no_lease(kind: str, request: pytest.FixtureRequest) -> None:
    """200 runs' keepers on one event loop (the triggerer's way: every trigger a
    coroutine of one loop) keep every lease for two ttl periods, then each ends
    on its run's release. The old keeper parked a default-executor thread per
    keeper in a blocking wait and lost leases from about 30 keepers on."""
    url: str = request.getfixturevalue(f"{kind}_url")
    ttl = 6.0  # 200 renewals every 2 s: a loaded shared CI host must keep up, not a fast one
    prefix = f"many-{secrets.token_hex(4)}"
    with connect(url) as store:
        infos = [granted_run_lease(store, f"{prefix}-{i}", ttl, url=url) for i in range(KEEPERS)]
        triggers = [DagRunLeaseKeeperTrigger(lease=info.to_xcom(), keeper_task_id="keeper")
                    for info in infos]

        def all_kept_past(seconds: float) -> bool:
            records = {r.key: r for r in store.list(prefix)}
            return all((r := records.get(info.key)) is not None and r.token == info.token
                       and r.held and r.renewed_at is not None and r.acquired_at is not None
                       and (r.renewed_at - r.acquired_at).total_seconds() > seconds
                       for info in infos)

        async def scenario() -> list[dict[str, Any]]:
            running = [asyncio.ensure_future(_first_event(t)) for t in triggers]
            deadline = asyncio.get_running_loop().time() + 60
            while not await asyncio.to_thread(all_kept_past, 2 * ttl):
                assert asyncio.get_running_loop().time() < deadline, "not every lease was kept"
                assert not any(r.done() for r in running), [r.result() for r in running
                                                            if r.done()][:3]
                await asyncio.sleep(0.2)
            for trigger in triggers:
                assert await asyncio.to_thread(release_as_the_run, store, trigger)
            return list(await asyncio.wait_for(asyncio.gather(*running), 60))

        events = asyncio.run(scenario())
    lost = [e for e in events if e["status"] != "released"]
    assert not lost, f"{len(lost)} of {KEEPERS} leases lost, e.g. {lost[:3]}"

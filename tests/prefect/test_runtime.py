"""Inside a run: current_lease() in the flow and its tasks, the holder shown
in the Prefect UI (tag and artifact), busy and lost outcomes seen by a
direct caller, the leased() block, and the store from a Prefect Block."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from prefect import task
from prefect.exceptions import CancelledRun

from lease_integrations import LeaseBusy, LeaseLock, LeaseLost, connect
from lease_integrations.prefect import (
    LeaseStoreBlock,
    NoCurrentLease,
    current_lease,
    leased,
    leased_flow,
)

pytestmark = pytest.mark.usefixtures("prefect_api")


def _memory() -> str:
    return f"memory://prefect-{uuid.uuid4().hex[:8]}"


@task
def token_in_task() -> int:
    return current_lease().token


@task
async def token_in_async_task() -> int:
    return current_lease().token


def test_current_lease_in_flow_and_tasks() -> None:
    url = _memory()

    @leased_flow(key="tasks", store=url, ttl=5)
    def with_tasks() -> dict[str, Any]:
        lease = current_lease()
        submitted = token_in_task.submit()  # runs on the thread-pool task runner
        return {"flow": lease.token, "direct": token_in_task(), "submitted": submitted.result(),
                "meta": lease.meta}

    first = with_tasks()
    second = with_tasks()
    assert first["flow"] == first["direct"] == first["submitted"] >= 1
    assert second["flow"] == second["direct"] == second["submitted"] > first["flow"]
    assert first["meta"]["flow_name"] == "with-tasks" and first["meta"]["host"]
    assert "flow_run_id" in first["meta"] and "pid" in first["meta"]
    with pytest.raises(NoCurrentLease):
        current_lease()


def test_current_lease_where_only_prefect_context_travels() -> None:
    """Remote-style task runners (Dask, Ray) ship Prefect's own context
    (``serialize_context`` / ``hydrated_context``) to a fresh thread, not
    other context variables: the lease is found by flow run id there."""
    import threading

    from prefect.context import hydrated_context, serialize_context

    @leased_flow(key="hydrated", store=_memory(), ttl=5, annotate=False)
    def ships_context() -> tuple[int, Any]:
        shipped = serialize_context()
        seen: list[Any] = []

        def worker() -> None:
            with hydrated_context(shipped):
                seen.append(current_lease().token)

        thread = threading.Thread(target=worker)
        thread.start()
        thread.join(30)
        return current_lease().token, seen

    token, seen = ships_context()
    assert seen == [token]


def test_current_lease_in_async_flow_and_tasks() -> None:
    @leased_flow(key="async-tasks", store=_memory(), ttl=5)
    async def with_async_tasks() -> tuple[int, int, int]:
        futures = token_in_task.submit()
        return current_lease().token, await token_in_async_task(), futures.result()

    flow_token, in_async_task, in_task = asyncio.run(with_async_tasks())
    assert flow_token == in_async_task == in_task >= 1


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_the_run_is_tagged_and_has_an_artifact_naming_key_and_token(is_async: bool) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    def shown() -> int:
        return current_lease().token

    async def shown_async() -> int:
        return current_lease().token

    leased = leased_flow(key="shown-in-ui", store=_memory(), ttl=5)(
        shown_async if is_async else shown)
    state = asyncio.run(leased(return_state=True)) if is_async else leased(return_state=True)
    run_id = state.state_details.flow_run_id
    with get_client(sync_client=True) as client:
        run = client.read_flow_run(run_id)
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run_id])))
    assert "lease:shown-in-ui" in run.tags
    (artifact,) = artifacts
    assert artifact.key == "lease-shown-in-ui"
    assert "shown-in-ui" in artifact.data and "token 1" in artifact.data


def test_direct_callers_see_prefect_outcomes_for_busy_runs() -> None:
    url = _memory()
    skip = leased_flow(key="busy", store=url, on_busy="skip", annotate=False)(lambda: 1)
    fail = leased_flow(key="busy", store=url, on_busy="fail", annotate=False)(lambda: 1)
    wait = leased_flow(key="busy", store=url, on_busy="wait", wait_timeout=0.5,
                       annotate=False)(lambda: 1)
    with LeaseLock(connect(url), "busy", ttl=5).hold() as held:
        state = skip(return_state=True)
        assert state.is_cancelled() and held.holder in (state.message or "")
        with pytest.raises(CancelledRun):
            skip()
        with pytest.raises(LeaseBusy) as raised:
            fail()
        assert raised.value.holder == held.holder
        state = wait(return_state=True)
        assert state.is_failed() and held.holder in (state.message or "")
    assert skip() == 1  # free again


def test_check_policy_never_completes_after_a_loss() -> None:
    url = _memory()
    store = connect(url)

    @leased_flow(key="checked", store=url, ttl=3, on_lost="check", annotate=False)
    def ignores_the_loss() -> str:
        store.force_release("checked", by="operator")  # broken while the body runs
        lease = current_lease()
        lease.lost.wait(10)  # the heartbeat's refused renewal marks it lost
        return "finished anyway"

    state = ignores_the_loss(return_state=True)
    assert state.is_failed(), state
    assert "was lost" in (state.message or "")


def test_leased_block_inside_tasks() -> None:
    url = _memory()

    @task
    def exclusive_step() -> tuple[int, int]:
        with leased("publish", ttl=5, store=url) as lease:
            return lease.token, current_lease().token

    @task
    async def exclusive_async_step() -> int:
        async with leased("publish", ttl=5, store=url) as lease:
            return lease.token

    @task(retries=0)
    def contended_step() -> int:
        with leased("publish", ttl=5, store=url):
            return 0

    from prefect import flow

    @flow
    def partly_exclusive() -> list[Any]:
        first = exclusive_step()
        second = exclusive_async_step.submit().result()
        with LeaseLock(connect(url), "publish", ttl=5).hold():
            third = contended_step(return_state=True)
        return [first, second, third]

    first, second, third = partly_exclusive()
    assert first[0] == first[1] < second
    # The flow's own block holds the key: a nested hold in the same thread is
    # refused at once as not re-entrant, naming the holder.
    assert third.is_failed() and "not re-entrant" in (third.message or "")
    with pytest.raises(NoCurrentLease):
        current_lease()


def test_leased_block_under_check_runs_on_and_ends_lost() -> None:
    """``on_lost="check"`` stops nothing (the default, ``exit``, would end
    this process: see test_loss_and_crash): the block runs to its end, which
    then raises ``LeaseLost``, never a success."""
    url = _memory()
    ran_on = 0
    with pytest.raises(LeaseLost), leased("cut", ttl=3, store=url, on_lost="check") as lease:
        connect(url).force_release("cut", by="operator")
        assert lease.lost.wait(10)  # the heartbeat's refused renewal marks it lost
        for _ in range(20):
            time.sleep(0.01)
            ran_on += 1
    assert ran_on == 20


def test_leased_async_block_is_cancelled_on_loss() -> None:
    """``on_lost="cancel"``: the task running the block is cancelled at its
    next await and the block ends with ``LeaseLost``."""
    url = _memory()
    reached: list[str] = []

    async def block() -> None:
        async with leased("cut-async", ttl=3, store=url, on_lost="cancel"):
            connect(url).force_release("cut-async", by="operator")
            reached.append("broken")
            await asyncio.sleep(30)
            reached.append("slept")

    started = time.monotonic()
    with pytest.raises(LeaseLost):
        asyncio.run(block())
    assert reached == ["broken"]
    assert time.monotonic() - started < 10  # one heartbeat (1 s), not the 30 s sleep


def test_store_from_a_prefect_block(tmp_path: Any) -> None:
    db = tmp_path / "block.db"
    block = LeaseStoreBlock(url=f"sqlite://{db}")
    name = f"leases-{uuid.uuid4().hex[:6]}"
    block.save(name)

    @leased_flow(key="from-block", store=f"block:{name}", ttl=5, annotate=False)
    def by_name() -> int:
        return current_lease().token

    @leased_flow(key="from-block", store=LeaseStoreBlock.load(name), ttl=5, annotate=False)
    def by_instance() -> int:
        return current_lease().token

    first, second = by_name(), by_instance()
    assert first < second
    record = connect(f"sqlite://{db}").get("from-block")
    assert record is not None and record.token == second


def test_block_keeps_the_password_secret() -> None:
    block = LeaseStoreBlock(url="redis://jobs:s3cr%40t@cache.internal:6380/2")
    assert block.url == "redis://jobs@cache.internal:6380/2"
    assert block.password is not None and block.password.get_secret_value() == "s3cr@t"
    assert "s3cr" not in repr(block) and "s3cr" not in block.model_dump_json()
    assert block.get_url() == "redis://jobs:s3cr%40t@cache.internal:6380/2"
    with pytest.raises(ValueError, match="'mysql'"):
        LeaseStoreBlock(url="mysql://db/leases")


def test_block_type_is_found_through_the_collections_entry_point() -> None:
    """How Prefect finds block classes by slug (``Block.load`` in a process
    that never imported us): the ``prefect.collections`` entry point."""
    from prefect.blocks.core import Block
    from prefect.plugins import load_prefect_collections

    assert "lease_integrations" in load_prefect_collections()
    assert Block.get_block_class_from_key("lease-store") is LeaseStoreBlock

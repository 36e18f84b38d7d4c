"""The cooperative policies (``check``, ``cancel``), the child-process runner,
and the corruption cases the old in-thread interrupt had that still apply to
them: a forked child leaving a block, nested holds ending out of order, a
body that swallows a cancel, and a SQLite transaction cut short."""

from __future__ import annotations

import asyncio
import linecache
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from lease_integrations import (
    ConfigurationError,
    Lease,
    LeaseBusy,
    LeaseLock,
    LeaseLost,
    LeaseStore,
    StoreUnavailable,
    connect,
)
from lease_integrations.keeper.descendants import descendants
from tests.conftest import store_url_for


@pytest.fixture(params=["memory", "sqlite", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LeaseStore]:
    s = connect(store_url_for(request, request.param, tmp_path))
    yield s
    s.close()


def poll(condition: Any, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


# -- check ----------------------------------------------------------------------------
def test_check_leaves_the_block_running_and_ends_it_lease_lost(store: LeaseStore,
                                                               key: str) -> None:
    lock = LeaseLock(store, key, ttl=1.5, on_lost="check")
    steps_after_loss = 0
    with pytest.raises(LeaseLost) as lost, lock.hold() as lease:
        store.force_release(key, by="test")
        poll(lambda: lease.lost, "the heartbeat to find the loss")
        for _ in range(3):  # nothing interrupts the block
            time.sleep(0.01)
            steps_after_loss += 1
    assert steps_after_loss == 3
    assert lost.value.token == lease.token and "refused" in lost.value.reason


# -- fork --------------------------------------------------------------------------------
@pytest.mark.parametrize("policy", ["exit", "check"])
def test_a_forked_child_never_releases_or_renews_its_parents_lease(
        store: LeaseStore, key: str, policy: str) -> None:
    if store.url.startswith("memory://"):
        pytest.skip("a forked child has its own copy of a memory store")
    lock = LeaseLock(store, key, ttl=3.0, on_lost=policy)
    with lock.hold() as lease:
        pid = os.fork()
        if pid == 0:  # the child leaves the block and the process, as a fork would
            code = 0
            try:
                with lock.hold(wait=0):  # the key is the parent's: busy
                    code = 3
            except LeaseBusy:
                pass
            except BaseException:
                code = 4
            os._exit(code)  # the outer hold's exit runs in the parent only
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        record = store.get(key)
        assert record is not None and record.held and record.token == lease.token
        assert not lease.lost
    record = store.get(key)
    assert record is not None and not record.held  # released by the parent, once


@pytest.mark.parametrize("policy", ["exit", "check"])
def test_a_forked_child_leaving_the_block_leaves_the_lease_to_its_parent(
        tmp_path: Path, key: str, policy: str) -> None:
    store = connect(f"sqlite://{tmp_path}/leases.db")
    lock = LeaseLock(store, key, ttl=3.0, on_lost=policy)
    pid = -1
    try:
        with lock.hold() as lease:
            pid = os.fork()
            if pid:  # the parent, still in its block, once the child has left it
                _, status = os.waitpid(pid, 0)
                assert os.waitstatus_to_exitcode(status) == 0
                record = store.get(key)
                assert record is not None and record.held and record.token == lease.token
                assert not lease.lost
    finally:
        if pid == 0:
            os._exit(0)  # the child ran the hold's exit; nothing of pytest runs on in it
    kinds = [event.kind for event in store.history(key)]
    assert kinds == ["acquired", "released"], kinds  # released once, by the parent


# -- nested holds ending out of order ---------------------------------------------------
def test_a_generator_hold_closed_inside_another_hold_releases_only_its_own(
        store: LeaseStore, key: str) -> None:
    outer_lock = LeaseLock(store, f"{key}-outer", ttl=3.0)
    inner_lock = LeaseLock(store, f"{key}-inner", ttl=3.0)

    def inner() -> Iterator[Lease]:
        with inner_lock.hold() as lease:
            yield lease

    started = inner()
    next(started)  # the inner hold is entered first ...
    with outer_lock.hold() as outer:
        started.close()  # ... and ends inside the outer one
        record = store.get(outer.key)
        assert record is not None and record.held and record.token == outer.token
        with pytest.raises(LeaseBusy):
            LeaseLock(store, outer.key, ttl=3.0).acquire()
        inner_record = store.get(f"{key}-inner")
        assert inner_record is not None and not inner_record.held
    assert not outer.lost


# -- cancel ---------------------------------------------------------------------------------
def test_cancel_applies_to_hold_async_only(store: LeaseStore, key: str) -> None:
    with pytest.raises(ConfigurationError, match="hold_async"):
        LeaseLock(store, key, on_lost="cancel").hold()


def test_a_body_that_swallows_the_cancel_meets_it_again_at_every_await(
        store: LeaseStore, key: str) -> None:
    """``wait_for`` on Python 3.10/3.11 can swallow a cancel; a body may too.
    Cancelled again at every later await, it makes no progress after the loss."""
    lock = LeaseLock(store, key, ttl=1.5, on_lost="cancel")
    progress_after_loss = swallowed = 0

    async def body() -> None:
        nonlocal progress_after_loss, swallowed
        async with lock.hold_async() as lease:
            store.force_release(key, by="test")
            for _ in range(400):
                try:
                    await asyncio.wait_for(asyncio.sleep(0.01), 1.0)
                    if lease.lost:
                        progress_after_loss += 1
                except asyncio.CancelledError:
                    swallowed += 1

    with pytest.raises(LeaseLost):
        asyncio.run(body())
    assert swallowed > 0
    assert progress_after_loss <= 1, progress_after_loss


def test_an_outside_cancel_after_a_loss_stays_a_cancel(store: LeaseStore, key: str) -> None:
    if sys.version_info < (3, 11):
        pytest.skip("Python 3.10 cannot tell one cancel from another")
    lock = LeaseLock(store, key, ttl=1.5, on_lost="cancel")

    async def main() -> None:
        async def body() -> None:
            async with lock.hold_async():
                store.force_release(key, by="test")
                try:
                    await asyncio.sleep(30)  # our cancel lands here
                except asyncio.CancelledError:
                    asyncio.current_task().cancel()  # type: ignore[union-attr]  # and a caller's
                    raise

        with pytest.raises(asyncio.CancelledError):
            await body()

    asyncio.run(main())


# -- a SQLite transaction cut short ---------------------------------------------------------
def test_a_ctrl_c_right_after_begin_leaves_no_transaction_open(tmp_path: Path, key: str) -> None:
    url = f"sqlite://{tmp_path}/leases.db?timeout=1"
    store, other = connect(url), connect(url)
    store.get(key)  # schema made, connection open

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        if frame.f_code.co_name != "_transaction":
            return None
        previous: list[str] = []

        def local(frame: FrameType, event: str, arg: Any) -> Any:
            if event == "line":
                if previous and "BEGIN IMMEDIATE" in previous[-1]:
                    raise KeyboardInterrupt
                previous.append(linecache.getline(frame.f_code.co_filename, frame.f_lineno))
            return local
        return local

    sys.settrace(tracer)
    try:
        with pytest.raises(KeyboardInterrupt):
            store.acquire(key, "h", "secret", 5.0, {})
    finally:
        sys.settrace(None)
    try:
        granted = other.acquire(key, "h2", "secret2", 5.0, {})  # not "database is locked"
    except StoreUnavailable as exc:
        pytest.fail(f"the file stayed write-locked: {exc}")
    assert granted.granted
    store.close()
    other.close()


# -- the child-process runner ----------------------------------------------------------------
def square_with_token(x: int) -> tuple[int, str]:
    return x * x, os.environ["LEASE_TOKEN"]


def work_until_killed(path: str) -> None:
    import subprocess

    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    with open(path, "a") as f:
        while True:
            f.write(f"{time.time()}\n")
            f.flush()
            time.sleep(0.02)


def fail() -> None:
    raise ValueError("the work failed")


def test_run_in_subprocess_returns_the_result_and_passes_the_token(tmp_path: Path,
                                                                   key: str) -> None:
    lock = LeaseLock(connect(f"sqlite://{tmp_path}/leases.db"), key, ttl=3.0)
    result, token = lock.run_in_subprocess(square_with_token, (7,))
    assert result == 49 and int(token) >= 1
    with pytest.raises(ValueError, match="the work failed"):
        lock.run_in_subprocess(fail)
    record = lock.store.get(key)
    assert record is not None and not record.held


def test_run_in_subprocess_ends_the_child_on_loss_and_the_caller_lives_on(
        tmp_path: Path, key: str) -> None:
    store = connect(f"sqlite://{tmp_path}/leases.db")
    lock = LeaseLock(store, key, ttl=1.5)  # on_lost="exit" does not apply to the caller
    ticks = tmp_path / "ticks"
    before = descendants()

    def break_once_working() -> None:
        poll(ticks.exists, "the child to work", 30)
        store.force_release(key, by="test")

    import threading
    threading.Thread(target=break_once_working, daemon=True).start()
    with pytest.raises(LeaseLost):
        lock.run_in_subprocess(work_until_killed, (str(ticks),))
    last = ticks.read_text().splitlines()[-1]
    poll(lambda: not (descendants() - before), "the child's tree to be gone", 5)
    assert ticks.read_text().splitlines()[-1] == last  # no work after the runner returned

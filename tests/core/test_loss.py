"""Loss delivery (issue 12): one test per way a lost lease used to let a job
go on or kill the wrong thing. Each lease is broken the way an operator
breaks it: a second connection to the same store calls ``force_release``."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from lease_integrations import LeaseLock, LeaseLost, LeaseStore, connect
from lease_integrations.core import metrics
from tests.conftest import store_url_for
from tests.core.loss_support import assert_nothing_left, releasing, wait_until, writes_held_up


@pytest.fixture(params=["memory", "sqlite", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: os.PathLike[str]) -> str:
    return store_url_for(request, request.param, tmp_path)


@pytest.fixture
def store(url: str) -> Iterator[LeaseStore]:
    store = connect(url)
    yield store
    store.close()


@pytest.fixture
def breaker(url: str) -> Iterator[LeaseStore]:
    """The operator's own connection."""
    store = connect(url)
    yield store
    store.close()


def run_on(where: str, fn: Callable[[], Any]) -> Any:
    """Run ``fn`` on the main thread or a worker thread; return or raise as it did."""
    if where == "main":
        return fn()
    outcome: list[Any] = []

    def target() -> None:
        try:
            outcome.append((True, fn()))
        except BaseException as exc:
            outcome.append((False, exc))

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(60)
    assert outcome, "the worker thread did not finish"
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


@pytest.mark.parametrize("where", ["main", "worker"])
def test_1_except_exception_in_job_code_does_not_swallow_the_loss(
        store: LeaseStore, breaker: LeaseStore, key: str, where: str) -> None:
    lock = LeaseLock(store, key, ttl=1.5)
    after_loss = []

    def job() -> None:
        with lock.hold() as lease:
            for item in range(500):
                try:
                    if item == 3:
                        breaker.force_release(key, by="test")
                    threading.Event().wait(0.01)  # one item's work
                    if lease.lost:
                        after_loss.append(item)
                except Exception:  # the commonest pattern in job code
                    continue

    with pytest.raises(LeaseLost):
        run_on(where, job)
    # At most the item during which the loss was declared finishes.
    assert len(after_loss) <= 1, f"{len(after_loss)} items ran after the loss"


def test_2_a_block_whose_lease_was_broken_before_it_ended_does_not_succeed(
        store: LeaseStore, breaker: LeaseStore, key: str) -> None:
    lock = LeaseLock(store, key, ttl=5)
    for _ in range(20):
        with pytest.raises(LeaseLost), lock.hold():
            breaker.force_release(key, by="test")  # the body's last step


def unrelated_work() -> str:
    for _ in range(20):
        threading.Event().wait(0.002)
    return "done"


def test_3_acquire_on_a_pool_thread_arms_nothing_there(
        store: LeaseStore, breaker: LeaseStore, key: str) -> None:
    lock = LeaseLock(store, key, ttl=1.5)
    with ThreadPoolExecutor(1) as pool:
        lease = pool.submit(lock.acquire).result(10)
        breaker.force_release(key, by="test")
        assert lease.lost.wait(10)
        assert pool.submit(unrelated_work).result(10) == "done"

    async def main() -> str:
        lease = await asyncio.to_thread(lock.acquire)
        breaker.force_release(key, by="test")
        assert await asyncio.to_thread(lease.lost.wait, 10)
        return await asyncio.wait_for(asyncio.to_thread(unrelated_work), 10)

    assert asyncio.run(main()) == "done"


@pytest.mark.parametrize("where", ["main", "worker"])
def test_4_sync_hold_in_a_coroutine_hits_only_its_own_task(
        store: LeaseStore, breaker: LeaseStore, key: str, where: str) -> None:
    lock = LeaseLock(store, key, ttl=1.5)

    async def unrelated(stop: asyncio.Event) -> int:
        rounds = 0
        while not stop.is_set():
            await asyncio.sleep(0.005)
            rounds += 1
        return rounds

    async def main() -> int:
        stop = asyncio.Event()
        other = asyncio.create_task(unrelated(stop))
        with pytest.raises(LeaseLost), lock.hold():
            breaker.force_release(key, by="test")
            await asyncio.sleep(30)  # the loss must end this, and only this
        stop.set()
        return await other

    async def alone() -> list[str]:  # no other task: the loop sits in select()
        slept = []
        with pytest.raises(LeaseLost), lock.hold():
            breaker.force_release(key, by="test")
            await asyncio.sleep(20)
            slept.append("the sleep was not cut short")
        return slept

    async def notebook_cell() -> None:  # plain sync code while a loop runs
        with pytest.raises(LeaseLost), lock.hold():
            breaker.force_release(key, by="test")
            threading.Event().wait(30)

    assert run_on(where, lambda: asyncio.run(main())) > 0
    assert run_on(where, lambda: asyncio.run(alone())) == []
    if where == "main":
        asyncio.run(notebook_cell())


@pytest.mark.parametrize("where", ["main", "worker"])
@pytest.mark.parametrize("url", ["sqlite", "redis"], indirect=True)
def test_5_nested_holds_each_get_their_own_loss_even_inside_release(
        url: str, store: LeaseStore, key: str, where: str) -> None:
    outer_store = connect(f"memory://{key}")
    outer = LeaseLock(outer_store, f"{key}-outer", ttl=1.5)
    inner = LeaseLock(store, key, ttl=5)
    went_on = []
    leases = []
    in_release = releasing(store)

    def job() -> None:
        me = threading.get_ident()
        with outer.hold() as outer_lease:
            interrupt_sent = threading.Event()
            outer_lease.on_lost(lambda _lease: interrupt_sent.set())  # runs after the interrupt
            with ExitStack() as stack:
                def operator() -> None:  # break the outer while the inner releases
                    wait_until(lambda: me in in_release, "the inner release")
                    outer_store.force_release(outer_lease.key, by="test")
                    interrupt_sent.wait(10)
                    let_go()

                helper = threading.Thread(target=operator)
                stack.callback(helper.join)
                with inner.hold() as inner_lease:
                    leases.append(inner_lease)
                    let_go = stack.enter_context(writes_held_up(url))
                    helper.start()
            went_on.append("code after the inner block ran")

    with pytest.raises(LeaseLost) as lost:
        run_on(where, job)
    assert lost.value.key == f"{key}-outer"
    assert not went_on
    assert_nothing_left(store, leases)


CHILD_SIGNALS = textwrap.dedent("""
    import os, signal, sys
    from lease_integrations import LeaseLock, connect
    seen = []
    if sys.argv[1] == "user-handler":
        signal.signal(signal.SIGUSR1, lambda signum, frame: seen.append(signum))
    lock = LeaseLock(connect("memory://x"), "k", ttl=5)
    with lock.hold():
        pass
    os.kill(os.getpid(), signal.SIGUSR1)  # a late or stray SIGUSR1: handled at once
    print("alive", len(seen), flush=True)
""")


@pytest.mark.parametrize("disposition", ["default", "user-handler"])
def test_6_a_stray_or_late_signal_never_kills_the_process(disposition: str) -> None:
    child = subprocess.run([sys.executable, "-c", CHILD_SIGNALS, disposition],
                           capture_output=True, text=True, timeout=60)
    assert child.returncode == 0, child.stderr
    assert child.stdout.split() == ["alive", "1" if disposition == "user-handler" else "0"]


CHILD_STORM = textwrap.dedent("""
    import signal, sys, threading
    from lease_integrations import LeaseLock, connect
    sys.setswitchinterval(1e-5)  # signals arrive at many different bytecodes
    seen = []
    signal.signal(signal.SIGUSR1, lambda signum, frame: seen.append(signum))
    lock = LeaseLock(connect("memory://storm"), "k", ttl=5)
    stop = threading.Event()
    main = threading.main_thread().ident
    sent = 0
    def storm():
        global sent
        while not stop.is_set():
            signal.pthread_kill(main, signal.SIGUSR1)
            sent += 1
    thread = threading.Thread(target=storm)
    thread.start()
    for _ in range(5000):
        with lock.hold():
            pass
    stop.set()
    thread.join()
    print("done", sent > 0, len(seen) > 0, flush=True)
""")


def test_7_signals_during_arm_and_disarm_neither_deadlock_nor_get_lost() -> None:
    child = subprocess.run([sys.executable, "-c", CHILD_STORM], capture_output=True,
                           text=True, timeout=60)
    assert child.returncode == 0, child.stderr
    assert child.stdout.split() == ["done", "True", "True"]


class _Instrument:
    def add(self, *args: Any, **kwargs: Any) -> None:
        pass

    def record(self, *args: Any, **kwargs: Any) -> None:
        pass


class _BrokenCounter(_Instrument):
    def add(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("broken meter")


class _Meter:
    def create_counter(self, name: str, **kwargs: Any) -> _Instrument:
        return _BrokenCounter() if name == "lease.lost" else _Instrument()

    def create_histogram(self, name: str, **kwargs: Any) -> _Instrument:
        return _Instrument()


class BrokenLossMeterProvider:
    """An application's meter provider whose ``lease.lost`` counter raises."""

    def get_meter(self, *args: Any, **kwargs: Any) -> _Meter:
        return _Meter()


@pytest.fixture
def broken_meter() -> Iterator[None]:
    metrics.use_meter_provider(BrokenLossMeterProvider())
    yield
    metrics.use_meter_provider(None)


def test_8_the_heartbeat_survives_a_failing_step_and_leaves_no_entry(
        broken_meter: None, store: LeaseStore, key: str, tmp_path: Path) -> None:
    other = LeaseLock(store, key, ttl=1.5)
    other_lease = other.acquire()
    unreachable = connect(f"sqlite://{tmp_path}/unreachable.db?timeout=0.05")
    doomed = LeaseLock(unreachable, key, ttl=1.5)
    leases = []

    def job() -> None:
        with doomed.hold() as lease:
            leases.append(lease)
            with writes_held_up(f"sqlite://{tmp_path}/unreachable.db"):
                for _ in range(3000):  # renewals fail; the trust window closes
                    threading.Event().wait(0.01)

    with pytest.raises(LeaseLost):
        run_on("worker", job)
    first = store.get(key)
    assert first is not None
    wait_until(lambda: (store.get(key) or first).renewed_at != first.renewed_at,
               "the other lease to be renewed after the failing step", 5)
    assert other.release(other_lease)
    assert_nothing_left(unreachable, leases)
    unreachable.close()


def test_8_an_interrupt_landing_anywhere_in_a_hold_leaves_no_lease_behind(
        store: LeaseStore, breaker: LeaseStore, key: str) -> None:
    """The outer lease breaks at moments spread over the inner holds' enter,
    body and exit; every inner lease ends released and off the heartbeat."""
    outer = LeaseLock(connect(f"memory://{key}-o"), f"{key}-outer", ttl=1.5)
    inner = LeaseLock(store, key, ttl=5)
    leases = []
    for round_ in range(6):
        def job(round_: int = round_) -> None:
            with outer.hold() as outer_lease:
                threading.Timer(0.05 + 0.037 * round_, outer.store.force_release,
                                (outer_lease.key, "test")).start()
                for _ in range(100000):
                    with inner.hold() as lease:
                        leases.append(lease)

        with pytest.raises(LeaseLost):
            run_on("worker" if round_ % 2 else "main", job)
    assert_nothing_left(store, leases)


@pytest.mark.parametrize("where", ["main", "worker"])
@pytest.mark.parametrize("url", ["sqlite", "redis"], indirect=True)
def test_9_an_interrupt_during_a_store_call_in_the_block_leaves_the_store_whole(
        url: str, store: LeaseStore, breaker: LeaseStore, key: str, where: str) -> None:
    """Job code that itself calls a store (an inner lease, a ``leasectl``-like
    tool) is interrupted at its next bytecode, which is mostly just after a
    store query returned. Before store calls were shielded, SQLite was left
    inside ``BEGIN IMMEDIATE``: the file stayed write-locked, the hold's own
    release failed and every other connection waited out its busy timeout."""
    operator = connect(url)
    lock = LeaseLock(store, key, ttl=0.5)
    leases = []
    try:
        def job() -> None:
            with lock.hold() as lease:
                leases.append(lease)
                threading.Timer(0.01, operator.force_release, (key, "operator")).start()
                while True:  # the job's own writes through the same library
                    breaker.force_release(f"{key}-other", by="job")

        for _ in range(8):
            with pytest.raises(LeaseLost):
                run_on(where, job)
            assert_nothing_left(store, leases)
            with LeaseLock(operator, f"{key}-third", ttl=1).hold():  # the store takes writes
                pass
            breaker.force_release(f"{key}-other", by="job")  # so does the job's connection
    finally:
        operator.close()

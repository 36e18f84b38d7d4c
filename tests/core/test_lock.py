"""LeaseLock above the store cut: acquire/hold/release, waiting, heartbeat,
the trust window and the loss policies. Runs on the memory and SQLite stores
(the other stores are covered by the conformance suite and the race test)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lease_integrations import Lease, LeaseBusy, LeaseLock, LeaseLost, LeaseStore, connect


@pytest.fixture(params=["memory", "sqlite"])
def local_store(request: pytest.FixtureRequest, tmp_path: object, key: str) -> Iterator[LeaseStore]:
    url = f"memory://{key}" if request.param == "memory" else f"sqlite://{tmp_path}/l.db"
    store = connect(url)
    yield store
    store.close()


def wait_for(event: threading.Event, timeout: float, what: str) -> None:
    if not event.wait(timeout):
        pytest.fail(f"timed out after {timeout} s waiting for {what}")


def test_hold_gives_a_lease_with_token_and_releases_it(local_store: LeaseStore, key: str) -> None:
    lock = LeaseLock(local_store, key, ttl=5)
    with lock.hold() as lease:
        assert lease.key == key and lease.token >= 1 and not lease.lost
        record = local_store.get(key)
        assert record is not None and record.holder == lease.holder and record.held
        assert record.meta["pid"] and record.meta["host"]
    after = local_store.get(key)
    assert after is not None and after.state == "released"
    assert lease.released


def test_a_second_holder_is_told_who_holds_the_lease(local_store: LeaseStore, key: str) -> None:
    first = LeaseLock(local_store, key, ttl=5, meta={"dag_id": "billing"})
    with first.hold() as lease, pytest.raises(LeaseBusy) as busy:
        LeaseLock(local_store, key, ttl=5).acquire(wait=0)
    assert busy.value.holder == lease.holder
    assert busy.value.token == lease.token
    assert busy.value.expires_at is not None
    assert lease.holder in str(busy.value) and "dag_id=billing" in str(busy.value)


def test_wait_with_timeout_gives_up_with_lease_busy(local_store: LeaseStore, key: str) -> None:
    lock = LeaseLock(local_store, key, ttl=5)
    with lock.hold():
        started = time.monotonic()
        with pytest.raises(LeaseBusy):
            lock.acquire(wait=0.3)
        assert time.monotonic() - started >= 0.3


def test_waiter_gets_the_lease_when_it_is_released(local_store: LeaseStore, key: str) -> None:
    lock = LeaseLock(local_store, key, ttl=5)
    holder = lock.acquire()
    got: list[Lease] = []
    waiting = threading.Event()

    def waiter() -> None:
        waiting.set()
        got.append(lock.acquire(wait=None))

    thread = threading.Thread(target=waiter)
    thread.start()
    wait_for(waiting, 5, "the waiter to start")
    lock.release(holder)
    thread.join(timeout=10)
    assert got and got[0].token > holder.token
    lock.release(got[0])


def test_heartbeat_keeps_the_lease_past_its_ttl(local_store: LeaseStore, key: str) -> None:
    # "check", not the default "exit": a loss here (a starved CI machine) must
    # fail this test at lease.check(), not end the whole pytest process with
    # exit status 75 and no report. A 2 s ttl leaves renewals ~1 s of slack.
    lock = LeaseLock(local_store, key, ttl=2.0, on_lost="check")
    with lock.hold() as lease:
        deadline = time.monotonic() + 4.0  # two ttls
        while time.monotonic() < deadline:
            lease.check()
            time.sleep(0.05)
        record = local_store.get(key)
        assert record is not None and record.held and record.holder == lease.holder
        with pytest.raises(LeaseBusy):
            LeaseLock(local_store, key, ttl=2.0).acquire()


def test_check_policy_raises_at_the_next_check(local_store: LeaseStore, key: str) -> None:
    lock = LeaseLock(local_store, key, ttl=1.5, on_lost="check")
    callbacks: list[Lease] = []
    with pytest.raises(LeaseLost), lock.hold() as lease:
        lease.on_lost(callbacks.append)
        local_store.force_release(key, by="test")
        deadline = time.monotonic() + 10
        while not lease.lost and time.monotonic() < deadline:
            time.sleep(0.02)  # not interrupted: policy is check
        assert lease.lost
        lease.check()
    assert callbacks == [lease]


def test_a_block_that_ignores_the_loss_still_does_not_succeed(local_store: LeaseStore, key: str) -> None:
    lock = LeaseLock(local_store, key, ttl=1.5, on_lost="check")
    with pytest.raises(LeaseLost), lock.hold() as lease:
        local_store.force_release(key, by="test")
        deadline = time.monotonic() + 10
        while not lease.lost and time.monotonic() < deadline:
            time.sleep(0.02)
        # the block swallows nothing and just returns: exit must still fail it


def test_block_errors_release_the_lease_and_propagate(local_store: LeaseStore, key: str) -> None:
    lock = LeaseLock(local_store, key, ttl=5)
    with pytest.raises(ZeroDivisionError), lock.hold():
        1 / 0  # noqa: B018
    record = local_store.get(key)
    assert record is not None and record.state == "released"


def test_release_by_a_lost_holder_does_not_touch_the_new_holder(local_store: LeaseStore, key: str) -> None:
    lock = LeaseLock(local_store, key, ttl=1.5, on_lost="check")
    old = lock.acquire()
    local_store.force_release(key, by="test")
    new = LeaseLock(local_store, key, ttl=5).acquire()
    assert not lock.release(old)
    record = local_store.get(key)
    assert record is not None and record.holder == new.holder and record.held
    lock.release(new)


def test_trust_window_closes_locally_when_renewals_cannot_happen(key: str) -> None:
    """A store that stops answering: the holder gives the lease up at
    start-of-last-renewal + ttl - margin, before the store could expire it."""
    store = connect(f"memory://{key}")
    blocked = threading.Event()
    real_renew = store.renew

    def hanging_renew(*args: object, **kwargs: object) -> bool:
        blocked.wait(30)  # an unreachable server: the call does not come back
        return False

    lock = LeaseLock(store, key, ttl=1.0, on_lost="check")
    lease = lock.acquire()
    store.renew = hanging_renew  # type: ignore[method-assign]
    try:
        deadline = time.monotonic() + 10
        while not lease.lost and time.monotonic() < deadline:
            time.sleep(0.01)
        assert lease.lost and "trust window" in (lease.lost_reason or "")
        assert "a renewal had been in flight for" in (lease.lost_reason or "")  # for operators
        record = store.get(key)
        # lost locally while the store still counts the lease as ours (or just expired)
        assert record is not None and record.holder == lease.holder
    finally:
        blocked.set()
        store.renew = real_renew  # type: ignore[method-assign]
        lock.release(lease)


def test_one_heartbeat_thread_serves_every_lease(local_store: LeaseStore, key: str) -> None:
    """ttl 3 s: each renewal (due every second) has 1.4 s to land before its
    trust window closes, so a loaded CI machine's half-second stall (one slow
    fsync, a starved thread) is no false loss; with ttl 1 it had 0.47 s."""
    locks = [LeaseLock(local_store, f"{key}-{i}", ttl=3.0, on_lost="check") for i in range(50)]
    leases = [lock.acquire() for lock in locks]
    try:
        time.sleep(0)  # let the heartbeat start
        names = [t.name for t in threading.enumerate()]
        assert names.count("lease-heartbeat") == 1
        assert sum(n.startswith("lease-renew") for n in names) <= 4
        # Two renewals of every lease: each moves its window on by about a second.
        firsts = [lease.trusted_until for lease in leases]
        deadline = time.monotonic() + 30
        while any(lease.trusted_until < first + 1.5 for lease, first in zip(leases, firsts)):
            assert time.monotonic() < deadline, "the heartbeat stopped renewing"
            for lease in leases:
                lease.check()
            time.sleep(0.1)
    finally:
        for lock, lease in zip(locks, leases):
            lock.release(lease)


def test_a_nested_hold_of_the_same_key_fails_at_once_as_not_reentrant(
        local_store: LeaseStore, key: str) -> None:
    """It used to wait for ever on itself with ``wait=None``."""
    lock = LeaseLock(local_store, key, ttl=5.0)
    with lock.hold() as outer:
        started = time.monotonic()
        with pytest.raises(LeaseBusy, match="not re-entrant") as busy, lock.hold(wait=None):
            pytest.fail("entered a second hold of the same key")
        assert time.monotonic() - started < 2
        assert busy.value.token == outer.token
        with pytest.raises(LeaseBusy, match="not re-entrant"), \
                LeaseLock(connect(local_store.url), key, ttl=5.0).hold(wait=None):
            pass  # another store object for the same store and key: the same lease
    with lock.hold():  # once left, the key can be held again
        pass


def test_another_thread_of_this_process_waits_and_is_told_who_holds(
        local_store: LeaseStore, key: str) -> None:
    lock = LeaseLock(local_store, key, ttl=5.0)
    seen: list[str] = []
    with lock.hold():
        def contend() -> None:
            try:
                with lock.hold(wait=0):
                    pass
            except LeaseBusy as busy:
                seen.append(str(busy))
        thread = threading.Thread(target=contend)
        thread.start()
        thread.join(10)
    assert len(seen) == 1 and "this process: another thread or task" in seen[0]
    assert "not re-entrant" not in seen[0]


SIGTERM_HOLDER = """
import sys, time
from lease_integrations import LeaseLock, connect
lock = LeaseLock(connect(sys.argv[1]), sys.argv[2], ttl=60.0)
with lock.hold() as lease:
    print("held", lease.token, flush=True)
    time.sleep(60)
"""


def test_sigterm_gives_a_plain_scripts_lease_back(tmp_path: Path, key: str) -> None:
    """systemd and Kubernetes stop with SIGTERM: the lease must not stay held
    for its whole ttl (60 s here), and the process still ends by SIGTERM."""
    url = f"sqlite://{tmp_path}/leases.db"
    proc = subprocess.Popen([sys.executable, "-c", SIGTERM_HOLDER, url, key],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().split()[0] == "held"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == -signal.SIGTERM
    with connect(url) as store:
        record = store.get(key)
        assert record is not None and not record.held
        assert [e.kind for e in store.history(key)] == ["acquired", "released"]

"""``hold_async(supersede=True)`` / ``acquire_async(supersede=True)``: the
supersede of ``test_supersede.py`` for asyncio code. The old holder is a real
process (``supersede_process.py``) writing fenced rows, or a holder "elsewhere"
whose exit nothing here can see (the grant then waits for its broken record's
expiry, which leaves time to cancel the superseding task meanwhile)."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lease_integrations import LEASE_LOST_EXIT_STATUS, LeaseLock, LeaseStore, connect
from lease_integrations.core.errors import ConfigurationError, SupersedeRefused
from lease_integrations.core.supersede_guards import only_newer
from lease_integrations.keeper.kernel import is_gone, process_state
from tests.core.polling import poll

PROCESS = Path(__file__).with_name("supersede_process.py")


@pytest.fixture(params=["memory", "sqlite", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path, key: str) -> str:
    if request.param == "memory":
        return f"memory://{key}"
    if request.param == "sqlite":
        return f"sqlite://{tmp_path}/leases.db"
    found: str = request.getfixturevalue("redis_url")
    return found


@pytest.fixture
def store(url: str) -> Iterator[LeaseStore]:
    s = connect(url)
    yield s
    s.close()


def hold_elsewhere(store: LeaseStore, key: str, ttl: float, **meta: object) -> int:
    """A holder on another host (its exit cannot be seen from here)."""
    record = store.acquire(key, "elsewhere:7", "secret-elsewhere", ttl,
                           {"host": "elsewhere", "pid": 7, **meta}).record
    assert record is not None and record.holder == "elsewhere:7"
    return record.token


@pytest.mark.parametrize("url", ["sqlite", "redis"], indirect=True)
def test_an_async_run_supersedes_a_holder_process_which_can_no_longer_write(
        url: str, store: LeaseStore, key: str, tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    old = subprocess.Popen([sys.executable, str(PROCESS), url, key, str(db), str(tmp_path),
                            "old", "--ttl", "3"])
    try:
        ready = tmp_path / "old.ready"
        old_token, old_pid = map(int, poll(
            lambda: ready.exists() and ready.read_text(), 60, "the old holder").split()[:2])

        def rows() -> list[tuple[int, int]]:
            with sqlite3.connect(db) as ledger:
                return list(ledger.execute("SELECT token, at_ns FROM ledger_rows ORDER BY rowid"))

        poll(lambda: len(rows()) >= 3, 30, "the old holder's first writes")

        async def supersede() -> tuple[int, int, bool]:
            lock = LeaseLock(store, key, ttl=3, on_lost="check")
            async with lock.hold_async(supersede=True) as lease:
                granted = time.monotonic_ns()
                return lease.token, granted, not is_gone(process_state(old_pid))

        new_token, granted, old_ran = asyncio.run(asyncio.wait_for(supersede(), 60))
        assert new_token > old_token
        assert not old_ran, "the old holder still ran when the async run got the lease"
        assert old.wait(timeout=30) == LEASE_LOST_EXIT_STATUS
        late = [row for row in rows() if row[0] == old_token and row[1] >= granted]
        assert late == [], "the fence accepted a write of the old holder after the new grant"
        kinds = [e.kind for e in store.history(key)]
        assert "superseded" in kinds and kinds[-1] == "released"
    finally:
        if old.poll() is None:
            old.kill()
        old.wait(timeout=30)


def test_a_cancelled_supersede_releases_the_lease_it_was_granted(
        store: LeaseStore, key: str) -> None:
    """Cancelled while it waits for the old holder to be gone: the worker
    thread cannot be stopped, takes the lease, and must give it back, not
    leave it renewed for a task that no longer exists."""
    old_token = hold_elsewhere(store, key, ttl=2.0)
    lock = LeaseLock(store, key, ttl=5, on_lost="check")

    async def cancel_midway() -> None:
        task = asyncio.ensure_future(lock.acquire_async(supersede=True))
        await asyncio.to_thread(poll, lambda: any(
            e.kind == "broken" for e in store.history(key)), 30, "the break")
        assert not task.done()  # still waiting for the old holder's expiry
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(asyncio.wait_for(cancel_midway(), 60))
    events = poll(lambda: (lambda ev: ev if ev and ev[-1].kind == "released" else None)(
        store.history(key)), 30, "the granted lease to be released")
    granted = [e.token for e in events if e.kind == "acquired"]
    assert len(granted) == 2 and granted[1] > old_token
    record = store.get(key)
    assert record is not None and record.state == "released"
    # Nothing renews it any more: a plain acquire gets the key at once.
    fresh = LeaseLock(store, key, ttl=5, on_lost="check").acquire(wait=0)
    assert fresh.token > granted[1]


def test_the_guard_refuses_an_older_run_and_leaves_the_holder_alone(
        store: LeaseStore, key: str) -> None:
    old_token = hold_elsewhere(store, key, ttl=30.0, logical_date="2026-12-04T00:00:00+00:00")
    lock = LeaseLock(store, key, ttl=5, on_lost="check",
                     meta={"logical_date": "2026-11-01T00:00:00+00:00"})

    async def backfill() -> None:
        async with lock.hold_async(supersede=True, supersede_if=only_newer("logical_date")):
            pytest.fail("the backfill got the lease")

    with pytest.raises(SupersedeRefused, match=r"only_newer\('logical_date'\) refused"):
        asyncio.run(asyncio.wait_for(backfill(), 30))
    record = store.get(key)
    assert record is not None and record.held and record.token == old_token
    assert [e.kind for e in store.history(key)] == ["acquired"]


def test_a_bad_guard_is_refused_before_any_store_call(store: LeaseStore, key: str) -> None:
    lock = LeaseLock(store, key, ttl=5, on_lost="check")
    with pytest.raises(ConfigurationError, match="supersede_if must be a callable"):
        lock.hold_async(supersede=True, supersede_if="newer")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="only applies with supersede=True"):
        lock.hold_async(supersede_if=only_newer())
    with pytest.raises(ConfigurationError, match="only applies with supersede=True"):
        asyncio.run(lock.acquire_async(supersede_if=only_newer()))
    assert store.get(key) is None and list(store.history(key)) == []

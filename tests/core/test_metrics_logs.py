"""The structured log lines an operator greps for: acquire, busy,
renew_failed, lost and release, each with key, token and holder as record
attributes (``extra``), from a real LeaseLock on a real SQLite store."""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lease_integrations import LeaseBusy, LeaseLock, LeaseStore, connect


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "leases.db"


@pytest.fixture
def sqlite_store(db: Path) -> Iterator[LeaseStore]:
    store = connect(f"sqlite://{db}?timeout=0.05")
    yield store
    store.close()


def lease_lines(caplog: pytest.LogCaptureFixture, key: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records
            if r.name == "lease_integrations" and getattr(r, "lease_key", None) == key]


def fields(record: logging.LogRecord) -> tuple[str, object, object]:
    return (record.lease_event, record.lease_token, record.lease_holder)  # type: ignore[attr-defined]


def test_acquire_busy_release_lines(caplog: pytest.LogCaptureFixture,
                                    sqlite_store: LeaseStore, key: str) -> None:
    caplog.set_level(logging.INFO, logger="lease_integrations")
    lock = LeaseLock(sqlite_store, key, ttl=30.0)
    lease = lock.acquire()
    with pytest.raises(LeaseBusy):
        LeaseLock(sqlite_store, key, ttl=30.0).acquire(wait=0)
    lock.release(lease)
    assert [fields(r) for r in lease_lines(caplog, key)] == [
        ("acquire", lease.token, lease.holder),
        ("busy", lease.token, lease.holder),  # names the holder the caller ran into
        ("release", lease.token, lease.holder),
    ]


def test_renew_failed_then_lost_lines(caplog: pytest.LogCaptureFixture,
                                      sqlite_store: LeaseStore, db: Path, key: str) -> None:
    caplog.set_level(logging.INFO, logger="lease_integrations")
    lock = LeaseLock(sqlite_store, key, ttl=2.0, on_lost="check")
    lease = lock.acquire()
    blocker = sqlite3.connect(db, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")  # renewals time out until the trust window closes
        assert lease.lost.wait(15), "the trust window did not close"
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
        lock.release(lease)
    # The lost line is logged on the heartbeat's thread just after the flag is set.
    deadline = time.monotonic() + 10
    while not any(r.lease_event == "lost" for r in lease_lines(caplog, key)):  # type: ignore[attr-defined]
        assert time.monotonic() < deadline, "no 'lost' log line"
        time.sleep(0.02)
    events = [fields(r) for r in lease_lines(caplog, key)]
    t = lease.token
    assert events[0] == ("acquire", t, lease.holder)
    assert ("renew_failed", t, lease.holder) in events
    assert events.count(("lost", t, lease.holder)) == 1
    assert events.index(("renew_failed", t, lease.holder)) < events.index(("lost", t, lease.holder))
    lost = next(r for r in lease_lines(caplog, key) if r.lease_event == "lost")  # type: ignore[attr-defined]
    assert lost.levelno == logging.WARNING and "trust window" in lost.getMessage()

"""OpenTelemetry metrics from a real LeaseLock on a real SQLite store, read
back through the OpenTelemetry SDK's in-memory reader."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lease_integrations import LeaseBusy, LeaseLock, LeaseStore, connect
from lease_integrations.core import metrics

sdk_metrics = pytest.importorskip("opentelemetry.sdk.metrics")
sdk_export = pytest.importorskip("opentelemetry.sdk.metrics.export")


@pytest.fixture
def reader() -> Iterator[Any]:
    reader = sdk_export.InMemoryMetricReader()
    provider = sdk_metrics.MeterProvider(metric_readers=[reader])
    metrics.use_meter_provider(provider)
    yield reader
    metrics.use_meter_provider(None)
    provider.shutdown()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "leases.db"


@pytest.fixture
def sqlite_store(db: Path) -> Iterator[LeaseStore]:
    store = connect(f"sqlite://{db}?timeout=0.05")
    yield store
    store.close()


def points(reader: Any, name: str, key: str) -> list[Any]:
    """Data points of one instrument for one lease key (other tests' leases
    may still be reporting into the same provider)."""
    found = []
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            if scope.scope.name != metrics.METER_NAME:
                continue
            for metric in scope.metrics:
                if metric.name == name:
                    found += [p for p in metric.data.data_points
                              if p.attributes.get("lease.key") == key]
    return found


def total(reader: Any, name: str, key: str) -> int:
    return sum(p.value for p in points(reader, name, key))


def test_acquire_busy_and_release_are_measured(reader: Any, sqlite_store: LeaseStore,
                                               key: str) -> None:
    lock = LeaseLock(sqlite_store, key, ttl=30.0)
    lease = lock.acquire()
    [acquire] = points(reader, "lease.acquire.duration", key)
    assert acquire.count == 1 and acquire.sum >= 0
    assert points(reader, "lease.held.duration", key) == []

    with pytest.raises(LeaseBusy):
        LeaseLock(sqlite_store, key, ttl=30.0).acquire(wait=0)
    with pytest.raises(LeaseBusy):
        LeaseLock(sqlite_store, key, ttl=30.0).acquire(wait=0)
    assert total(reader, "lease.busy", key) == 2

    lock.release(lease)
    [held] = points(reader, "lease.held.duration", key)
    assert held.count == 1 and held.sum >= 0
    lock.release(lease)  # a second release is not a second holding
    assert points(reader, "lease.held.duration", key)[0].count == 1
    assert total(reader, "lease.lost", key) == 0
    assert total(reader, "lease.renew.failures", key) == 0


def test_a_broken_lease_counts_as_lost(reader: Any, sqlite_store: LeaseStore, key: str) -> None:
    lock = LeaseLock(sqlite_store, key, ttl=2.0, on_lost="check")
    lease = lock.acquire()
    try:
        assert sqlite_store.force_release(key, "test") is not None
        assert lease.lost.wait(15), "the heartbeat did not report the break"
        assert total(reader, "lease.lost", key) == 1  # counted before the flag is set
        assert total(reader, "lease.renew.failures", key) == 0  # refused, not failed
    finally:
        lock.release(lease)


def test_failing_renewals_are_counted_then_the_loss(reader: Any, sqlite_store: LeaseStore,
                                                    db: Path, key: str) -> None:
    lock = LeaseLock(sqlite_store, key, ttl=2.0, on_lost="check")
    lease = lock.acquire()
    blocker = sqlite3.connect(db, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")  # every renewal now times out (busy_timeout 50 ms)
        assert lease.lost.wait(15), "the trust window did not close"
        failures = points(reader, "lease.renew.failures", key)
        assert sum(p.value for p in failures) >= 1
        assert {p.attributes["error.type"] for p in failures} == {"StoreUnavailable"}
        assert total(reader, "lease.lost", key) == 1  # counted before the flag is set
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
        lock.release(lease)

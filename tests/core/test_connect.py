"""connect(): explicit URLs, LEASE_STORE_URL, and the embedded default."""

from __future__ import annotations

from pathlib import Path

import pytest

from lease_integrations import LeaseLock, connect
from lease_integrations.core.config import mask_url
from lease_integrations.stores.sqlite import SqliteStore


def test_default_store_lives_under_airflow_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 key: str) -> None:
    monkeypatch.delenv("LEASE_STORE_URL", raising=False)
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    store = connect()
    assert isinstance(store, SqliteStore)
    assert store.path == tmp_path / "airflow" / "lease_integrations" / "leases.db"
    with LeaseLock(store, key, ttl=5).hold() as lease:
        assert lease.token == 1
    assert store.path.exists()


def test_default_store_without_airflow_uses_the_state_dir(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LEASE_STORE_URL", raising=False)
    monkeypatch.delenv("AIRFLOW_HOME", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    store = connect()
    assert isinstance(store, SqliteStore)
    assert store.path == tmp_path / "state" / "lease_integrations" / "leases.db"


def test_env_url_wins_over_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEASE_STORE_URL", f"sqlite://{tmp_path}/env.db")
    store = connect()
    assert isinstance(store, SqliteStore) and store.path == tmp_path / "env.db"


def test_sqlalchemy_style_absolute_sqlite_url(tmp_path: Path) -> None:
    store = connect(f"sqlite:///{tmp_path}/four-slashes.db")
    assert isinstance(store, SqliteStore) and store.path == tmp_path / "four-slashes.db"


def test_memory_stores_are_shared_by_name(key: str) -> None:
    a, b, other = connect(f"memory://{key}"), connect(f"memory://{key}"), connect(f"memory://{key}-2")
    with LeaseLock(a, key, ttl=5).hold():
        record = b.get(key)
        assert record is not None and record.held
        assert other.get(key) is None


def test_mask_url_hides_only_the_password() -> None:
    assert mask_url("redis://bob:pw@h:6379/0") == "redis://bob:***@h:6379/0"
    assert mask_url("postgresql://u:p%40ss@db/x?sslmode=require") == "postgresql://u:***@db/x?sslmode=require"
    assert mask_url("sqlite:///a/b.db") == "sqlite:///a/b.db"

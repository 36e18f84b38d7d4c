"""connect(): explicit URLs, LEASE_STORE_URL, and the embedded default."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lease_integrations import ConfigurationError, LeaseLock, connect
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
        assert lease.token >= 1
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


def test_three_slashes_and_one_name_is_refused_not_written_at_the_root(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``sqlite:///relative.db`` is relative to SQLAlchemy and ``/relative.db``
    to us: refused with the spellings of both, nothing written anywhere."""
    monkeypatch.chdir(tmp_path)
    name = f"lease-test-{os.getpid()}.db"
    with pytest.raises(ConfigurationError) as refused:
        connect(f"sqlite:///{name}")
    message = str(refused.value)
    assert "filesystem root" in message and f"sqlite:{name}" in message
    assert f"sqlite:////{name}" in message
    assert not Path("/", name).exists() and not (tmp_path / name).exists()
    # The working-directory form and a deeper absolute path work as documented.
    store = connect(f"sqlite:{name}")
    try:
        with LeaseLock(store, "k", ttl=5).hold() as lease:  # released before the cwd changes back
            assert lease.token >= 1
    finally:
        store.close()
    assert (tmp_path / name).exists()
    connect(f"sqlite://{tmp_path}/sub.db").close()


@pytest.mark.parametrize("value", ["bogus", "redis+cluser://a:1", "sqlite:///nested/x.db"])
def test_a_bad_lease_store_url_variable_is_named(value: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The caller wrote no URL: the error says where the bad one came from,
    and a URL without a scheme lists every scheme, cluster and sentinel too."""
    monkeypatch.setenv("LEASE_STORE_URL", value)
    with pytest.raises(ConfigurationError) as refused:
        connect()
    message = str(refused.value)
    assert message.startswith("$LEASE_STORE_URL"), message
    if "://" not in value:
        for scheme in ("redis+cluster://", "redis+sentinel://", "rediss://", "postgresql://",
                       "mongodb://", "sqlite://", "memory://"):
            assert scheme in message, (scheme, message)
    # A URL given in code is not blamed on the variable.
    with pytest.raises(ConfigurationError) as given:
        connect("bogus")
    assert "LEASE_STORE_URL" not in str(given.value)
    assert "redis+sentinel://" in str(given.value)


@pytest.mark.parametrize("url", ["redis:localhost:6379", "redis:/localhost:6379/0",
                                 "postgresql:db.example/jobs", "mongodb:h:27017/db"])
def test_a_url_without_its_slashes_says_so(url: str) -> None:
    """Issue 34: ``redis:localhost:6379`` blamed the database number; the
    text after the scheme is not quoted (it may be ``user:password@...``)."""
    scheme = url.partition(":")[0]
    with pytest.raises(ConfigurationError, match=f"needs '//' after '{scheme}:'") as caught:
        connect(url)
    assert "database" not in str(caught.value) and "localhost" not in str(caught.value)

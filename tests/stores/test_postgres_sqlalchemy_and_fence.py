"""PostgreSQL through SQLAlchemy (an Airflow SQL connection's engine), and the
core's SQL fence on PostgreSQL through psycopg and through SQLAlchemy: a stale
token raises StaleToken and the caller's write in the same transaction rolls
back with it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
import sqlalchemy as sa
from servers.postgres_server import PASSWORD

from lease_integrations import ConfigurationError, LeaseLock, SqlFence, StaleToken, connect
from lease_integrations.stores.postgres import PostgresStore


@pytest.fixture
def engine(postgres_url: str) -> Iterator[sa.Engine]:
    eng = sa.create_engine(postgres_url.replace("postgresql://", "postgresql+psycopg://"))
    yield eng
    eng.dispose()


@pytest.fixture
def ledger() -> str:
    return f"ledger_{uuid.uuid4().hex[:8]}"


def test_connect_accepts_a_sqlalchemy_engine(engine: sa.Engine, postgres_url: str,
                                             key: str) -> None:
    with connect(engine) as via_engine, connect(postgres_url) as via_url:  # type: ignore[arg-type]
        assert isinstance(via_engine, PostgresStore)
        assert PASSWORD not in via_engine.url
        lease = LeaseLock(via_engine, key, ttl=30).acquire()
        busy = via_url.acquire(key, "other", "other", 30, {})
        assert not busy.granted and busy.record is not None
        assert busy.record.holder == lease.holder  # one table, seen from both
        LeaseLock(via_engine, key, ttl=30).release(lease)


def test_from_engine_takes_store_options(engine: sa.Engine, key: str) -> None:
    with PostgresStore.from_engine(engine, table="engine_leases") as store:
        assert store.table == "engine_leases"
        assert store.acquire(key, "alice", "alice", 30, {}).granted


def test_from_engine_refuses_another_dialect() -> None:
    sqlite_engine = sa.create_engine("sqlite://")
    with pytest.raises(ConfigurationError, match="dialect 'sqlite'"):
        PostgresStore.from_engine(sqlite_engine)


def test_sql_fence_through_psycopg(postgres_url: str, ledger: str) -> None:
    fence = SqlFence(table=f"{ledger}_fence")
    with psycopg.connect(postgres_url) as conn:
        with conn.transaction():
            fence.create_table(conn)
            conn.execute(f"CREATE TABLE {ledger} (token bigint, note text)")

        def write(token: int, note: str) -> None:
            with conn.transaction():
                conn.execute(f"INSERT INTO {ledger} VALUES (%s, %s)", (token, note))
                fence.check(conn, "ledger", token)

        write(1, "first")
        write(3, "newer holder")
        write(3, "same holder again")
        with pytest.raises(StaleToken) as stale:
            write(2, "paused holder wakes up")
        assert stale.value.newest == 3 and stale.value.token == 2
        rows = conn.execute(f"SELECT token, note FROM {ledger} ORDER BY note").fetchall()
        assert rows == [(1, "first"), (3, "newer holder"), (3, "same holder again")]
        assert fence.newest(conn, "ledger") == 3


def test_sql_fence_through_sqlalchemy(engine: sa.Engine, ledger: str) -> None:
    fence = SqlFence(table=f"{ledger}_fence")
    with engine.begin() as conn:
        fence.create_table(conn)
        conn.exec_driver_sql(f"CREATE TABLE {ledger} (token bigint, note text)")
    with engine.begin() as conn:
        conn.exec_driver_sql(f"INSERT INTO {ledger} VALUES (5, 'current')")
        fence.check(conn, "ledger", 5)
    with pytest.raises(StaleToken), engine.begin() as conn:
        conn.exec_driver_sql(f"INSERT INTO {ledger} VALUES (4, 'late')")
        fence.check(conn, "ledger", 4)
    with engine.connect() as conn:
        tokens = [r[0] for r in conn.exec_driver_sql(f"SELECT token FROM {ledger}")]
    assert tokens == [5]


def test_lease_tokens_fence_a_late_holder(postgres_url: str, key: str, ledger: str) -> None:
    """The whole story on one database: an old holder's late write is refused
    once the next holder has written."""
    fence = SqlFence(table=f"{ledger}_fence")
    with connect(postgres_url) as store, psycopg.connect(postgres_url) as conn:
        with conn.transaction():
            fence.create_table(conn)
        old = store.acquire(key, "old", "old", 30, {}).record
        assert old is not None and store.force_release(key, by="ops") is not None
        new = store.acquire(key, "new", "new", 30, {}).record
        assert new is not None and new.token > old.token
        with conn.transaction():
            fence.check(conn, key, new.token)
        with pytest.raises(StaleToken), conn.transaction():
            fence.check(conn, key, old.token)

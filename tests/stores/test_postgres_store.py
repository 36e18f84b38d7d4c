"""PostgreSQL store specifics: URL checks, clear errors, bounded calls, the
schema, and a token counter that survives a server restart."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
from servers.postgres_server import DATABASE, PASSWORD, USER, PgServer, free_port

from lease_integrations import ConfigurationError, LeaseStore, StoreUnavailable, connect
from lease_integrations.stores.postgres import PostgresStore


@pytest.fixture
def pg(postgres_url: str) -> Iterator[LeaseStore]:
    store = connect(postgres_url)
    yield store
    store.close()


@pytest.mark.parametrize("table", ["bad-name", "leases;drop", "1leases", "x" * 51, ""])
def test_bad_table_names_are_refused_before_connecting(table: str) -> None:
    # Port 1 would refuse the connection: the name is checked first.
    with pytest.raises(ConfigurationError, match="table name"):
        connect(f"postgresql://u:pw@127.0.0.1:1/db?table={table}")


def test_unknown_option_is_named_and_the_password_masked() -> None:
    with pytest.raises(ConfigurationError) as err:
        connect("postgresql://u:topsecret@127.0.0.1:1/db?tabel=leases")
    assert "'tabel'" in str(err.value) and "topsecret" not in str(err.value)
    assert "u:***@127.0.0.1:1" in str(err.value)


def test_bad_timeout_value_is_named() -> None:
    with pytest.raises(ConfigurationError, match="statement_timeout"):
        connect("postgresql://u:pw@127.0.0.1:1/db?statement_timeout=soon")


def test_wrong_password_is_a_clear_error_at_connect(postgres_server: PgServer) -> None:
    url = f"postgresql://{USER}:wrong-password@127.0.0.1:{postgres_server.port}/{DATABASE}"
    with pytest.raises(StoreUnavailable) as err:
        connect(url)
    message = str(err.value)
    assert "password authentication failed" in message and "check the user and password" in message
    assert "wrong-password" not in message and f"{USER}:***@127.0.0.1" in message


def test_refused_port_fails_at_connect() -> None:
    with pytest.raises(StoreUnavailable, match="cannot connect to PostgreSQL"):
        connect(f"postgresql://u:pw@127.0.0.1:{free_port()}/db")


def test_a_server_that_never_answers_fails_within_connect_timeout() -> None:
    # A socket that listens but never speaks: TCP connects, the startup hangs.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        started = time.monotonic()
        with pytest.raises(StoreUnavailable):
            connect(f"postgresql://u:pw@127.0.0.1:{port}/db?connect_timeout=2")
        assert time.monotonic() - started < 30  # bounded, not a hang


def test_table_option_keeps_stores_apart(postgres_url: str, key: str) -> None:
    with connect(postgres_url + "?table=team_a") as a, connect(postgres_url + "?table=team_b") as b:
        assert a.acquire(key, "alice", "alice", 30, {}).granted
        assert b.acquire(key, "bob", "bob", 30, {}).granted  # another table, another lease
        assert a.get(key).holder == "alice"  # type: ignore[union-attr]
        assert b.get(key).holder == "bob"  # type: ignore[union-attr]


def test_migrate_is_idempotent_and_safe_when_processes_race(postgres_url: str) -> None:
    table = f"race_{os.getpid()}_{time.monotonic_ns() % 10**6}"
    errors: list[BaseException] = []
    start = threading.Barrier(6)

    def open_store() -> None:
        try:
            start.wait(timeout=10)
            PostgresStore.from_url(f"{postgres_url}?table={table}").close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=open_store) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    with PostgresStore.from_url(f"{postgres_url}?table={table}") as store:
        store.migrate()  # again, on purpose
        assert store.acquire("k", "alice", "alice", 30, {}).granted


def test_row_is_never_deleted_and_meta_is_jsonb(pg: LeaseStore, postgres_url: str, key: str) -> None:
    rec = pg.acquire(key, "alice", "alice", 30, {"dag_id": "d"}).record
    assert rec is not None and pg.release(key, "alice", rec.token)
    with psycopg.connect(postgres_url) as conn:
        row = conn.execute("SELECT holder, token, meta->>'dag_id' FROM leases WHERE key = %s",
                           (key,)).fetchone()
    assert row == (None, rec.token, "d")


def test_statement_timeout_bounds_a_call_blocked_by_a_lock(postgres_url: str, key: str) -> None:
    # A busy acquire reads the held row without locking it; a renewal must
    # lock the row, so a lock held elsewhere blocks it.
    with connect(postgres_url + "?statement_timeout=0.5") as store:
        token = store.acquire(key, "alice", "alice", 30, {}).record.token  # type: ignore[union-attr]
        with psycopg.connect(postgres_url) as blocker:
            blocker.execute("SELECT 1 FROM leases WHERE key = %s FOR UPDATE", (key,))
            with pytest.raises(StoreUnavailable, match="statement_timeout"):
                store.renew(key, "alice", token, 30)
            assert not store.acquire(key, "bob", "bob", 30, {}).granted  # busy, not blocked
        assert store.renew(key, "alice", token, 30)  # works again, still held


def test_a_paused_server_cannot_hang_a_call(private_postgres: PgServer, key: str) -> None:
    with connect(private_postgres.url + "?statement_timeout=1") as store:
        rec = store.acquire(key, "alice", "alice", 30, {}).record
        assert rec is not None
        private_postgres.pause()  # SIGSTOP: no statement_timeout can fire now
        try:
            with pytest.raises(StoreUnavailable, match="did not answer"):
                store.renew(key, "alice", rec.token, 30)
        finally:
            private_postgres.resume()
        assert store.renew(key, "alice", rec.token, 30)  # a fresh connection, same lease


def test_counter_survives_a_server_restart(private_postgres: PgServer, key: str) -> None:
    with connect(private_postgres.url) as store:
        tokens = []
        for name in ("a", "b", "c"):
            rec = store.acquire(key, name, name, 30, {}).record
            assert rec is not None
            tokens.append(rec.token)
            store.release(key, name, rec.token)
        private_postgres.stop("fast")
        with pytest.raises(StoreUnavailable):
            store.get(key)
        private_postgres.start()
        # The pooled connections died with the server; the store reconnects.
        rec = store.acquire(key, "d", "d", 30, {}).record
        assert rec is not None and rec.token > tokens[-1]
        assert tokens == sorted(set(tokens))


def test_store_works_in_a_forked_child_and_parent(pg: LeaseStore, key: str) -> None:
    rec = pg.acquire(key, "parent", "parent", 30, {}).record
    assert rec is not None
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: the parent's pooled connection must not be used here
        try:
            busy = pg.acquire(key, "child", "child", 30, {})
            ok = (not busy.granted and busy.record is not None
                  and busy.record.holder == "parent")
            os.write(write, b"ok" if ok else b"bad")
        finally:
            os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    assert os.read(read, 16) == b"ok" and status == 0
    os.close(read)
    assert pg.renew(key, "parent", rec.token, 30)  # the parent's session is intact
    assert pg.release(key, "parent", rec.token)


def test_repr_and_url_mask_the_password(pg: LeaseStore) -> None:
    assert PASSWORD not in pg.url and PASSWORD not in repr(pg)

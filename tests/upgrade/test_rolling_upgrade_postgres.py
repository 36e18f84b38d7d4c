"""A rolling upgrade of the PostgreSQL store keeps a held lease: a process of
the previous version (``OldClient``: that version's statements, frozen in
``old_postgres_statements``) holds a lease when the new store connects and
migrates the table; the new store sees the lease as held, the old process
renews and releases it, and from then on both versions take turns on the
key: every token is above every earlier one (also across a DELETE of the
lease row) and the history, read by either version, lists both versions'
events in the order they happened. An old process cycling while the
migration runs sees no error."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from servers.postgres_server import PgServer

from lease_integrations.stores.postgres import PostgresStore

from .old_postgres_statements import OldClient, new_secret

Event = tuple[str, int, str | None]


@pytest.fixture
def table(postgres_url: str) -> Iterator[str]:
    name = f"upgrade_{uuid.uuid4().hex[:10]}"
    yield name
    with psycopg.connect(postgres_url, autocommit=True) as db:
        db.execute(f"DROP TABLE IF EXISTS {name}, {name}_events, {name}_tokens")
        db.execute(f"DROP FUNCTION IF EXISTS {name}_keep_tokens()")


@pytest.fixture
def old(postgres_url: str, table: str) -> Iterator[OldClient]:
    client = OldClient(postgres_url, table)
    client.create_schema()
    yield client
    client.close()


def layout(url: str, table: str) -> dict[str, object]:
    """What the migration is meant to change, read from the catalog."""
    with psycopg.connect(url, autocommit=True) as db:
        pk = db.execute(
            "SELECT ARRAY(SELECT a.attname::text FROM unnest(c.conkey) WITH ORDINALITY k(n, i) "
            "JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n ORDER BY k.i) "
            "FROM pg_constraint c WHERE c.conrelid = to_regclass(%s) AND c.contype = 'p'",
            (f"{table}_events",)).fetchone()
        triggers = db.execute("SELECT tgname FROM pg_trigger WHERE tgrelid = to_regclass(%s) "
                              "ORDER BY tgname", (table,)).fetchall()
        row = db.execute("SELECT to_regclass(%s) IS NOT NULL, to_regclass(%s) IS NOT NULL",
                         (f"{table}_events_by_key", f"{table}_tokens")).fetchone()
    assert pk is not None and row is not None
    return {"events_key": pk[0], "triggers": [t for (t,) in triggers],
            "by_key_index": row[0], "counter_table": row[1]}


def counter(url: str, table: str, key: str) -> int | None:
    with psycopg.connect(url, autocommit=True) as db:
        row = db.execute(f"SELECT token FROM {table}_tokens WHERE key = %s", (key,)).fetchone()
    return None if row is None else int(row[0])


def test_a_rolling_upgrade_keeps_a_held_lease(postgres_url: str, table: str,
                                              old: OldClient) -> None:
    key, url = "job", f"{postgres_url}?table={table}"
    events: list[Event] = []
    tokens: list[int] = []

    def granted(token: int, holder: str) -> int:
        assert all(token > earlier for earlier in tokens), (token, tokens)
        tokens.append(token)
        events.append(("acquired", token, holder))
        return token

    def released(token: int, holder: str) -> None:
        events.append(("released", token, holder))

    # The old version holds the lease before the new one ever connects.
    old_secret = new_secret()
    ok, t_old, _ = old.acquire(key, "old-worker", old_secret)
    assert ok
    granted(t_old, "old-worker")
    assert layout(postgres_url, table)["by_key_index"], "the old layout, as that version made it"

    with PostgresStore.from_url(url) as new:
        # The new store migrated the table on connect, keeping what the old
        # version needs: the counter table and the event sequence.
        assert layout(postgres_url, table) == {
            "events_key": ["key", "id"], "by_key_index": False, "counter_table": True,
            "triggers": ["lease_keep_tokens_on_delete", "lease_keep_tokens_on_truncate"]}
        assert old.schema_is_current(), "an old process starting now would not migrate back"

        # The lease the old version holds is held for the new one too.
        rec = new.get(key)
        assert rec is not None and rec.held and (rec.holder, rec.token) == ("old-worker", t_old)
        busy = new.acquire(key, "new-worker", new_secret(), 30, {})
        assert not busy.granted
        assert busy.record is not None and (busy.record.holder, busy.record.token) == \
            ("old-worker", t_old)

        # The old holder renews and releases it on the migrated table.
        assert old.renew(key, old_secret, t_old)
        assert old.release(key, old_secret, t_old)
        released(t_old, "old-worker")

        # Then the versions take turns; each sees the other's hold as busy.
        for turn in range(3):
            secret = new_secret()
            got = new.acquire(key, f"new-{turn}", secret, 30, {"version": "new"})
            assert got.granted and got.record is not None
            t_new = granted(got.record.token, f"new-{turn}")
            ok, held_token, holder = old.acquire(key, "old-worker", new_secret())
            assert not ok and (held_token, holder) == (t_new, f"new-{turn}")
            assert new.renew(key, secret, t_new, 30)
            assert new.release(key, secret, t_new)
            released(t_new, f"new-{turn}")

            secret = new_secret()
            ok, t_old, _ = old.acquire(key, f"old-{turn}", secret, trim=turn == 1)
            assert ok
            granted(t_old, f"old-{turn}")
            busy = new.acquire(key, "new-worker", new_secret(), 30, {})
            assert not busy.granted and busy.record is not None
            assert (busy.record.holder, busy.record.token) == (f"old-{turn}", t_old)
            assert old.renew(key, secret, t_old)
            assert old.release(key, secret, t_old)
            released(t_old, f"old-{turn}")

        # An operator deletes the row after a new-version grant: the trigger
        # keeps its token, and the old version's first-acquire path (which
        # reads the counter) continues above it; and the other way round.
        secret = new_secret()
        got = new.acquire(key, "new-last", secret, 30, {})
        assert got.granted and got.record is not None
        t_new = granted(got.record.token, "new-last")
        assert new.release(key, secret, t_new)
        released(t_new, "new-last")
        with psycopg.connect(postgres_url, autocommit=True) as db:
            db.execute(f"DELETE FROM {table} WHERE key = %s", (key,))
        assert counter(postgres_url, table, key) == t_new
        secret = new_secret()
        ok, t_old, _ = old.acquire(key, "old-last", secret)
        assert ok
        granted(t_old, "old-last")
        assert old.release(key, secret, t_old)
        released(t_old, "old-last")
        with psycopg.connect(postgres_url, autocommit=True) as db:
            db.execute(f"DELETE FROM {table} WHERE key = %s", (key,))
        got = new.acquire(key, "new-after-delete", new_secret(), 30, {})
        assert got.granted and got.record is not None
        granted(got.record.token, "new-after-delete")

        # Both versions read one history, in the order things happened.
        seen = [(e.kind, e.token, e.holder) for e in new.history(key, limit=100)]
        assert seen == events
        assert old.history(key) == events


def test_an_old_process_cycling_through_the_migration_sees_no_error(
        postgres_url: str, table: str, old: OldClient) -> None:
    """The migration takes the tables' locks while old grants run: they wait
    for it (or it for them) instead of failing or deadlocking."""
    other = OldClient(postgres_url, table)
    started, stop = threading.Event(), threading.Event()
    errors: list[BaseException] = []
    tokens: list[int] = []
    after_migration: list[int] = []
    migrated = threading.Event()

    def cycle() -> None:
        try:
            while not stop.is_set():
                secret = new_secret()
                ok, token, _ = other.acquire("busy-key", "old-cycler", secret)
                assert ok, "nobody else holds busy-key"
                assert other.renew("busy-key", secret, token)
                assert other.release("busy-key", secret, token)
                tokens.append(token)
                started.set()
                if migrated.is_set():
                    after_migration.append(token)
                    if len(after_migration) >= 20:
                        return
        except BaseException as exc:
            errors.append(exc)
            started.set()

    thread = threading.Thread(target=cycle)
    thread.start()
    try:
        assert started.wait(30)
        with PostgresStore.from_url(f"{postgres_url}?table={table}") as new:
            migrated.set()
            thread.join(60)
            assert not thread.is_alive(), "the old process stopped making progress"
            got = new.acquire("busy-key", "new-worker", new_secret(), 30, {})
            assert got.granted and got.record is not None
            assert got.record.token > tokens[-1]
    finally:
        stop.set()
        thread.join(30)
        other.close()
    assert not errors, errors
    assert tokens == sorted(set(tokens)), "tokens strictly increase"
    assert layout(postgres_url, table)["events_key"] == ["key", "id"]


def test_the_old_schema_run_again_is_migrated_again(postgres_url: str, table: str,
                                                    old: OldClient) -> None:
    """An old process that runs its ``migrate`` after the upgrade recreates
    the redundant index; the next new store drops it again, and nothing is
    lost either way."""
    with PostgresStore.from_url(f"{postgres_url}?table={table}") as new:
        assert new.acquire("k", "a", "s", 30, {}).granted
    old.create_schema()
    assert layout(postgres_url, table)["by_key_index"]
    with PostgresStore.from_url(f"{postgres_url}?table={table}") as new:
        assert layout(postgres_url, table)["by_key_index"] is False
        rec = new.get("k")
        assert rec is not None and rec.holder == "a"


def test_a_role_that_may_not_migrate_keeps_working_on_the_old_layout(
        postgres_server: PgServer, postgres_url: str, table: str, old: OldClient,
        caplog: pytest.LogCaptureFixture) -> None:
    """Workers often connect as a role that may read and write the tables
    but not alter them: on the previous layout the new store still runs (its
    statements need nothing that layout lacks) and says what it could not do."""
    role = f"worker_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_server.admin_conninfo, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'worker-pw'")
    try:
        with psycopg.connect(postgres_url, autocommit=True) as owner:
            owner.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {table}, {table}_events, "
                          f"{table}_tokens TO {role}")
            owner.execute(f"GRANT USAGE ON SEQUENCE {table}_events_id_seq TO {role}")
        secret = new_secret()
        ok, held, _ = old.acquire("job", "old-worker", secret)
        assert ok
        parts = urlsplit(postgres_url)
        url = urlunsplit(parts._replace(netloc=f"{role}:worker-pw@{parts.hostname}:{parts.port}"))
        with caplog.at_level(logging.WARNING, logger="lease_integrations"), \
                PostgresStore.from_url(f"{url}?table={table}") as new:
            assert any("cannot migrate" in r.getMessage() for r in caplog.records), caplog.text
            busy = new.acquire("job", "new-worker", new_secret(), 30, {})
            assert not busy.granted and busy.record is not None
            assert busy.record.holder == "old-worker"
            assert old.release("job", secret, held)
            got = new.acquire("job", "new-worker", "s", 30, {})
            assert got.granted and got.record is not None and got.record.token > held
            assert new.release("job", "s", got.record.token)
            assert [(e.kind, e.holder) for e in new.history("job")] == [
                ("acquired", "old-worker"), ("released", "old-worker"),
                ("acquired", "new-worker"), ("released", "new-worker")]
        assert layout(postgres_url, table)["by_key_index"], "the layout was left as it was"
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as owner:
            owner.execute(f"REVOKE ALL ON {table}, {table}_events, {table}_tokens FROM {role}")
            owner.execute(f"REVOKE ALL ON SEQUENCE {table}_events_id_seq FROM {role}")
        with psycopg.connect(postgres_server.admin_conninfo, autocommit=True) as admin:
            admin.execute(f"DROP ROLE {role}")

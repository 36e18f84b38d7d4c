"""Issue 13, reproduction 2 on PostgreSQL: asynchronous streaming replication
loses the last grants when the primary crashes while its standby lags. The
test builds a primary and a streaming standby (``pg_basebackup -R``) on
127.0.0.1, stops the standby, grants more tokens on the primary, crashes it
(``immediate``), promotes the standby and prints the tokens before and after.
The history checker's rule 5 (no token granted twice) judges the run."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import psycopg
import pytest
from history import tokens_granted_twice
from servers.postgres_server import PgServer, pg_bin

from lease_integrations import LeaseStore, connect


def cycle(store: LeaseStore, key: str, who: str, log: list[tuple[int, str]]) -> int:
    rec = store.acquire(key, who, f"secret-{who}", 30, {}).record
    assert rec is not None, f"{who} was refused {key}"
    log.append((rec.token, who))
    assert store.release(key, f"secret-{who}", rec.token)
    return rec.token


def lsn(server: PgServer, query: str) -> int:
    with psycopg.connect(server.admin_conninfo, autocommit=True) as conn:
        row = conn.execute(f"SELECT ({query}) - '0/0'::pg_lsn").fetchone()
        assert row is not None and row[0] is not None
        return int(row[0])


@pytest.fixture
def pair() -> Iterator[tuple[PgServer, PgServer]]:
    bindir = pg_bin()
    if bindir is None or not (bindir / "initdb").exists():
        pytest.skip("no PostgreSQL binaries (set LEASE_TEST_PG_BIN)")
    primary, standby = PgServer(bindir), PgServer(bindir)
    try:
        primary.init()
        primary.start()
        primary.create_user_and_db()
        # initdb's pg_hba trusts local replication connections: copy over the socket.
        subprocess.run(
            [str(bindir / "pg_basebackup"), "-D", str(standby.data), "-R", "-X", "stream",
             "-h", str(primary.root), "-p", str(primary.port), "-U", "postgres", "--no-sync",
             "--checkpoint=fast"],  # the default spread checkpoint waits ~90 s
            check=True, capture_output=True, timeout=120, cwd=standby.root,
            **standby._run_as)
        standby.start()
        yield primary, standby
    finally:
        standby.cleanup()
        primary.cleanup()


def test_failover_to_a_lagging_standby_never_reissues_a_token(
    pair: tuple[PgServer, PgServer], key: str
) -> None:
    primary, standby = pair
    log: list[tuple[int, str]] = []
    store = connect(primary.url)
    before = [cycle(store, key, f"p{i}", log) for i in range(3)]
    target = lsn(primary, "pg_current_wal_lsn()")
    deadline = time.monotonic() + 30
    while lsn(standby, "pg_last_wal_replay_lsn()") < target:
        assert time.monotonic() < deadline, "the standby never caught up"
        time.sleep(0.05)
    standby.stop("fast")  # the standby lags from here on
    lagged = [cycle(store, key, f"lag{i}", log) for i in range(3)]
    store.close()
    primary.stop("immediate")  # a crash: the last grants die with it
    standby.start()
    with psycopg.connect(standby.admin_conninfo, autocommit=True) as conn:
        conn.execute("SELECT pg_promote(wait => true)")
    promoted = connect(standby.url)
    seen = promoted.get(key)
    assert seen is not None and seen.token == before[-1], "the standby lags by 3 grants"
    after = [cycle(promoted, key, f"s{i}", log) for i in range(3)]
    promoted.close()
    print(f"\npostgres failover: before {before}, lost with the primary {lagged}, "
          f"standby had {seen.token}, after promotion {after}")
    assert after[0] > max(before + lagged)
    assert tokens_granted_twice(log) == []

"""Uncontended cycle on the other stores, each beside its own floors:

- the round-trip floor: the most trivial request on the same kind of
  connection (``SELECT 1`` on SQLite and PostgreSQL, ``ping`` on MongoDB);
- the write floor: one durable single-row write on the same kind of
  connection and settings, because an acquire is a write and cannot be
  cheaper than one (on SQLite the write, with its fsync, is the real floor).

On MongoDB the store calls' round trips are also counted (pymongo's command
monitoring on a store of their own), for the performance issue's
"acquire / release round trips" row; and the lease contenders' history is
filled to its cap first, since every MongoDB update pays for the size of the
document it changes (the history is in it) and steady state is a full one.
"""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path
from typing import Any

from lease_integrations.core.store import HISTORY_LIMIT

from .harness import Contender, Result, interleaved
from .redis_cycle import lease_contenders


def sqlite_floors(url: str) -> list[Contender]:
    # Same file directory and the same pragmas as the store (WAL, synchronous=FULL).
    path = Path(url.removeprefix("sqlite://")).with_name("floor.db")
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE IF NOT EXISTS floor (id INTEGER PRIMARY KEY, n INTEGER)")
    conn.execute("INSERT OR IGNORE INTO floor VALUES (1, 0)")

    def select() -> Any:
        return conn.execute("SELECT 1").fetchone()

    def write() -> Any:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("UPDATE floor SET n = n + 1 WHERE id = 1")
        conn.execute("COMMIT")

    return [Contender("SELECT 1 (floor)", select, floor=True, note="no round trip: in-process"),
            Contender("1-row write txn (write floor)", write, floor=True, close=conn.close,
                      note="BEGIN IMMEDIATE; UPDATE; COMMIT (fsync)")]


def postgres_floors(url: str) -> list[Contender]:
    import psycopg

    conn = psycopg.connect(url, autocommit=True)
    conn.execute("CREATE TABLE IF NOT EXISTS bench_floor (id int PRIMARY KEY, n bigint)")
    conn.execute("INSERT INTO bench_floor VALUES (1, 0) ON CONFLICT DO NOTHING")

    def select() -> Any:
        return conn.execute("SELECT 1").fetchone()

    def write() -> Any:
        return conn.execute("UPDATE bench_floor SET n = n + 1 WHERE id = 1")

    return [Contender("SELECT 1 (floor)", select, floor=True, note="1 round trip"),
            Contender("1-row UPDATE (write floor)", write, floor=True, close=conn.close,
                      note="autocommit, 1 round trip")]


def mongo_floors(url: str) -> list[Contender]:
    from pymongo import MongoClient

    client: Any = MongoClient(url)
    coll = client.get_default_database()["bench_floor"]

    def ping() -> Any:
        return client.admin.command("ping")

    def write() -> Any:
        return coll.update_one({"_id": 1}, {"$inc": {"n": 1}}, upsert=True)

    return [Contender("ping (floor)", ping, floor=True, note="1 round trip"),
            Contender("1-doc update (write floor)", write, floor=True, close=client.close,
                      note="update_one $inc, upsert")]


FLOORS = {"sqlite": sqlite_floors, "postgres": postgres_floors, "mongo": mongo_floors}
#: Sent by pymongo to open and keep a connection, not by a store call.
MONGO_HANDSHAKE = {"saslStart", "saslContinue", "hello", "isMaster", "ismaster", "endSessions"}


def mongo_sends(url: str, key: str, cycles: int = 50) -> tuple[float, float]:
    """Commands per store-call cycle (acquire + release) and per acquire."""
    from pymongo import monitoring

    from lease_integrations.stores.mongo import MongoStore

    class Counter(monitoring.CommandListener):
        count = 0

        def started(self, event: monitoring.CommandStartedEvent) -> None:
            if event.command_name not in MONGO_HANDSHAKE:
                self.count += 1

        def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
            pass

        def failed(self, event: monitoring.CommandFailedEvent) -> None:
            pass

    counter = Counter()
    with MongoStore.from_url(url, event_listeners=[counter]) as store:
        store.get(key)  # the pool is open and authenticated from here on
        counter.count = acquire_sends = 0
        for _ in range(cycles):
            before = counter.count
            result = store.acquire(key, "bench-sends", "bench-sends-secret", 30, {})
            acquire_sends += counter.count - before
            if result.record is None or not store.release(key, "bench-sends-secret",
                                                          result.record.token):
                raise RuntimeError("MongoDB store: uncontended cycle refused")
        return round(counter.count / cycles, 2), round(acquire_sends / cycles, 2)


def run(kind: str, url: str, runs: int, seconds: float, log: Any) -> list[Result]:
    tag = f"bench-{uuid.uuid4().hex[:8]}"
    cs = FLOORS[kind](url) + lease_contenders(url, tag)
    try:
        if kind == "mongo":
            for c in cs:
                if c.release is not None and not c.floor:
                    for _ in range(HISTORY_LIMIT // 2 + 1):  # two events per cycle
                        c.release(c.acquire())
        results = interleaved(cs, runs, seconds, progress=lambda m: log(f"{kind} cycle: {m}"))
        if kind == "mongo":
            raw = next(r for r in results if r.name == "lease_integrations store calls")
            raw.sends_per_cycle, raw.sends_acquire = mongo_sends(url, f"{tag}-sends")
        return results
    finally:
        for c in cs:
            if c.close:
                c.close()

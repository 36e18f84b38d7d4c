"""Uncontended cycle on the other stores, each beside its own floors:

- the round-trip floor: the most trivial request on the same kind of
  connection (``SELECT 1`` on SQLite and PostgreSQL, ``ping`` on MongoDB);
- the write floor: one durable single-row write on the same kind of
  connection and settings, because an acquire is a write and cannot be
  cheaper than one (on SQLite the write, with its fsync, is the real floor).
"""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path
from typing import Any

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


def run(kind: str, url: str, runs: int, seconds: float, log: Any) -> list[Result]:
    cs = FLOORS[kind](url) + lease_contenders(url, f"bench-{uuid.uuid4().hex[:8]}")
    try:
        return interleaved(cs, runs, seconds, progress=lambda m: log(f"{kind} cycle: {m}"))
    finally:
        for c in cs:
            if c.close:
                c.close()

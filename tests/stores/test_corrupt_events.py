"""Issue 32, finding 5: history events written by hand (a ``detail`` that is
not JSON, a ``meta`` that is not an object, an ``at`` that is not a time)
get the checks records get. ``history()`` returns the readable events and
reports the others in ``unreadable`` (an ``EventList``), so ``leasectl
history`` prints the good ones and names the bad ones (exit 6, "unreadable"),
``leasectl check`` says which events it could not judge, and neither exits 5
(an internal error) as they did: SQLite's history raised ``JSONDecodeError``,
and the other stores dropped such events without a word."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
import redis
from cli.cli_helpers import run_leasectl
from pymongo import MongoClient

from lease_integrations import connect

#: Writes the hand-made events of one store; returns how many it wrote.
Damage = Callable[[str], int]


def damager(kind: str, url: str, tmp_path: Path) -> Damage:
    if kind == "sqlite":
        def damage_sqlite(key: str) -> int:
            rows = [("released", 1, "h", "yesterday", "{}"), ("released", 1, "h", 0.0, "{not json"),
                    ("acquired", 2, "h", 0.0, '{"meta": 5}'), ("released", 2, "h", 0.0, "[1]")]
            with sqlite3.connect(tmp_path / "leases.db") as db:
                db.executemany("INSERT INTO lease_events (key, kind, token, holder, at, detail) "
                               "VALUES (?, ?, ?, ?, ?, ?)", [(key, *r) for r in rows])
            return len(rows)
        return damage_sqlite
    if kind == "redis":
        def damage_redis(key: str) -> int:
            with redis.Redis.from_url(url) as raw:
                log, old = f"{{lease:{key}}}:log", f"{{lease:{key}}}:hist"
                raw.xadd(log, {"kind": "released", "token": "1", "detail": "{not json"})
                raw.xadd(log, {"kind": "acquired", "token": "2", "meta": "5"})
                raw.rpush(old, json.dumps({"kind": "released", "token": 1, "holder": "h",
                                           "at": "yesterday"}))
            return 3
        return damage_redis
    if kind == "postgres":
        def damage_postgres(key: str) -> int:
            with psycopg.connect(url, autocommit=True) as db:
                for detail in ('"just text"', '{"meta": 5}', '{"by": [1]}'):
                    db.execute("INSERT INTO leases_events (key, kind, token, holder, at, detail) "
                               "VALUES (%s, 'released', 1, 'h', now(), %s::jsonb)", (key, detail))
            return 3
        return damage_postgres

    def damage_mongo(key: str) -> int:
        texts = ["not json", '["released", 1, "yesterday", "h", {}]',
                 '["acquired", 2, 0, "h", {"meta": 5}]', '["released", 2, 0, "h", 7]']
        with MongoClient(url) as client:
            client.get_default_database()["leases"].update_one(
                {"_id": key}, {"$push": {"history": {"$each": texts}}})
        return len(texts)
    return damage_mongo


@pytest.mark.parametrize("kind", ["sqlite", "redis", "postgres", "mongo"])
def test_hand_written_events_are_reported_not_raised(
        request: pytest.FixtureRequest, tmp_path: Path, kind: str, key: str) -> None:
    url = f"sqlite://{tmp_path}/leases.db" if kind == "sqlite" \
        else str(request.getfixturevalue(f"{kind}_url"))
    with connect(url) as store:
        granted = store.acquire(key, "alice", "s", 30, {"dag_id": "d"})
        assert granted.granted and granted.record is not None
        bad = damager(kind, url, tmp_path)(key)
        events = store.history(key, 50)  # an EventList
        assert [(e.kind, e.token) for e in events] == [("acquired", granted.record.token)]
        unreadable = getattr(events, "unreadable", [])
        assert len(unreadable) == bad, unreadable
        assert all(e.key == key and e.field.startswith("event") for e in unreadable)

    shown = run_leasectl("--url", url, "history", key)
    assert shown.code == 6, (shown.code, shown.out, shown.err)  # unreadable, not internal (5)
    assert shown.out.count("UNREADABLE event") == bad and "granted to alice" in shown.out
    as_json = run_leasectl("--url", url, "history", key, "--json")
    assert as_json.code == 6, as_json.err
    assert len(json.loads(as_json.out)["unreadable_events"]) == bad
    checked = run_leasectl("--url", url, "check", key)
    assert checked.code == 6, (checked.code, checked.out, checked.err)
    assert checked.out.count("UNREADABLE event, not checked") == bad

"""Issue 13, reproduction 7 (records): a record someone overwrote by hand
with the store's own client raises ``CorruptRecord`` naming the key and the
field, from get and acquire, and list() reports that key as unreadable
while returning every other key normally."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
import redis
from pymongo import MongoClient

from lease_integrations import LeaseStore, connect
from lease_integrations.core import CorruptRecord, LeaseError, RecordList

Corrupt = Callable[[str], str]  # damages key's record, returns the field it damaged


def corrupter(kind: str, url: str, tmp_path: Path) -> Corrupt:
    if kind == "sqlite":
        def damage_sqlite(key: str) -> str:
            with sqlite3.connect(tmp_path / "leases.db") as db:
                db.execute("UPDATE leases SET meta = '{not json' WHERE key = ?", (key,))
            return "meta"
        return damage_sqlite
    if kind == "redis":
        def damage_redis(key: str) -> str:
            with redis.Redis.from_url(url) as raw:
                raw.hset(f"{{lease:{key}}}:rec", "token", "garbage")
            return "token"
        return damage_redis
    if kind == "postgres":
        def damage_postgres(key: str) -> str:
            with psycopg.connect(url, autocommit=True) as db:
                db.execute("UPDATE leases SET meta = '[1, 2]' WHERE key = %s", (key,))
            return "meta"
        return damage_postgres

    def damage_mongo(key: str) -> str:
        with MongoClient(url) as client:
            client.get_default_database()["leases"].update_one(
                {"_id": key}, {"$set": {"acquired_at": "yesterday"}})
        return "acquired_at"
    return damage_mongo


@pytest.mark.parametrize("kind", ["sqlite", "redis", "postgres", "mongo"])
def test_a_corrupt_record_is_named_and_the_other_keys_still_list(
    request: pytest.FixtureRequest, tmp_path: Path, kind: str, key: str
) -> None:
    url = f"sqlite://{tmp_path}/leases.db" if kind == "sqlite" \
        else str(request.getfixturevalue(f"{kind}_url"))
    damage = corrupter(kind, url, tmp_path)
    with connect(url) as store:
        for suffix in ("a", "bad", "c"):
            assert store.acquire(f"{key}-{suffix}", "alice", "s", 30, {"dag_id": "d"}).granted
        field = damage(f"{key}-bad")
        for call in (lambda s=store: s.get(f"{key}-bad"),
                     lambda s=store: s.acquire(f"{key}-bad", "bob", "s2", 30, {})):
            with pytest.raises(CorruptRecord) as caught:
                call()
            assert isinstance(caught.value, LeaseError)
            assert caught.value.key == f"{key}-bad" and caught.value.field == field
            assert f"{key}-bad" in str(caught.value) and field in str(caught.value)
        listed = store.list(f"{key}-")
        assert isinstance(listed, RecordList)
        assert [r.key for r in listed] == [f"{key}-a", f"{key}-c"]
        assert [(e.key, e.field) for e in listed.unreadable] == [(f"{key}-bad", field)]
        assert store.get(f"{key}-a") is not None
        assert isinstance(store, LeaseStore)

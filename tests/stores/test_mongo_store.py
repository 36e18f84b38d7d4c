"""MongoDB store specifics, against mongoeco's MongoDB-wire server (not
mongod: see docs/development.md): URL checks, clear errors, bounded calls, the sends per
operation (counted by pymongo's own command monitoring), write concern, the
history written in the lease's own update, the old history layout still read,
and a token counter that survives a server restart."""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from pymongo import MongoClient, monitoring
from servers.mongo_server import PASSWORD, USER, MongoWireServer, free_port

from lease_integrations import ConfigurationError, LeaseStore, StoreUnavailable, connect
from lease_integrations.core.store import HISTORY_LIMIT
from lease_integrations.stores import mongo_history
from lease_integrations.stores.mongo import MongoStore

AUTH_ONLY = {"saslStart", "saslContinue", "hello", "isMaster", "ismaster", "endSessions"}


class Sends(monitoring.CommandListener):
    """Every command the client sends (pymongo's monitoring, on the client)."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name not in AUTH_ONLY:
            self.names.append(event.command_name)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    def during(self, op: Callable[[], Any]) -> list[str]:
        self.names.clear()
        op()
        return list(self.names)


@pytest.fixture
def mongo(mongo_url: str) -> Iterator[LeaseStore]:
    store = connect(mongo_url)
    yield store
    store.close()


def with_option(url: str, option: str) -> str:
    return f"{url}&{option}" if "?" in url else f"{url}?{option}"


def test_unknown_option_is_named_and_the_password_masked() -> None:
    with pytest.raises(ConfigurationError) as err:
        connect("mongodb://u:topsecret@127.0.0.1:1/db?colection=leases")
    assert "'colection'" in str(err.value) and "topsecret" not in str(err.value)


@pytest.mark.parametrize("url, match", [
    ("mongodb://127.0.0.1:1/db?collection=bad$name", "collection name"),
    ("mongodb://127.0.0.1:1/db?collection=", "collection name"),
    ("mongodb://127.0.0.1:1/?collection=leases", "names no database"),
    ("mongodb://127.0.0.1:1/db?w=-1", "bad MongoDB store URL"),
    ("mongodb://127.0.0.1:1/db?socketTimeoutMS=soon", "bad MongoDB store URL"),
])
def test_bad_urls_are_refused_before_connecting(url: str, match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        connect(url)


def test_wrong_password_is_a_clear_error_at_connect(mongo_url: str) -> None:
    with pytest.raises(StoreUnavailable) as err:
        connect(mongo_url.replace(PASSWORD, "wrong-password"))
    message = str(err.value)
    assert "Authentication failed" in message and "check the user and password" in message
    assert "wrong-password" not in message and f"{USER}:***@127.0.0.1" in message


def test_refused_port_fails_within_server_selection_timeout() -> None:
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="MongoDB error"):
        connect(f"mongodb://127.0.0.1:{free_port()}/db?serverSelectionTimeoutMS=300")
    assert time.monotonic() - started < 30  # bounded, not a hang


def test_a_server_that_never_answers_fails_within_the_timeouts() -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        started = time.monotonic()
        with pytest.raises(StoreUnavailable):
            connect(f"mongodb://127.0.0.1:{port}/db?serverSelectionTimeoutMS=500"
                    "&connectTimeoutMS=500")
        assert time.monotonic() - started < 30


def test_write_concern_defaults_to_majority_and_the_url_can_change_it(mongo_url: str) -> None:
    with MongoStore.from_url(mongo_url) as store:
        assert store._collection().write_concern.document == {"w": "majority", "wtimeout": 5000}
        assert store.acquire("wc-majority", "alice", "alice", 30, {}).granted  # the server accepts it
    with MongoStore.from_url(with_option(mongo_url, "w=1")) as store:
        assert store._collection().write_concern.document.get("w") == 1


def test_collection_option_keeps_stores_apart(mongo_url: str, key: str) -> None:
    with connect(with_option(mongo_url, "collection=team_a")) as a, \
            connect(with_option(mongo_url, "collection=team_b")) as b:
        assert a.acquire(key, "alice", "alice", 30, {}).granted
        assert b.acquire(key, "bob", "bob", 30, {}).granted


def test_document_is_kept_and_expires_at_stays_a_date(mongo: LeaseStore, mongo_url: str,
                                                      key: str) -> None:
    rec = mongo.acquire(key, "alice", "alice", 30, {"dag_id": "d"}).record
    assert rec is not None and mongo.release(key, "alice", rec.token)
    mongo.force_release(key, by="ops")
    client: MongoClient[dict[str, Any]] = MongoClient(mongo_url)
    try:
        doc = client.get_default_database()["leases"].find_one({"_id": key})
    finally:
        client.close()
    assert doc is not None and doc["holder"] is None and doc["token"] == rec.token
    # The wire server has no type bracketing: a null here would read as expired.
    assert isinstance(doc["expires_at"], datetime)


def test_sends_per_operation(mongo_url: str, key: str) -> None:
    sends = Sends()
    with MongoStore.from_url(mongo_url, event_listeners=[sends]) as store:
        store.get(key)  # the pool is open and authenticated from here on
        granted: list[Any] = []
        # One conditional upsert, its history event inside it.
        assert sends.during(lambda: granted.append(store.acquire(key, "alice", "alice", 30, {}))) == \
            ["findAndModify"]
        rec = granted[0].record
        busy: list[Any] = []
        assert sends.during(lambda: busy.append(store.acquire(key, "bob", "bob", 30, {}))) == \
            ["findAndModify", "aggregate"]  # DuplicateKeyError, then the current record
        assert not busy[0].granted and busy[0].record.holder == "alice"
        assert sends.during(lambda: store.renew(key, "alice", rec.token, 30)) == ["update"]
        assert sends.during(lambda: store.release(key, "alice", rec.token)) == ["update"]
        assert sends.during(lambda: store.force_release(key, "ops")) == ["findAndModify"]
        assert sends.during(lambda: store.record_event(key, "lost", "alice", rec.token)) == \
            ["update"]
        assert sends.during(lambda: store.get(key)) == ["aggregate"]
        assert sends.during(lambda: store.history(key)) == ["aggregate"]


def test_history_is_written_with_the_lease_and_capped(mongo: LeaseStore, mongo_url: str,
                                                      key: str) -> None:
    """After every operation the document's newest event and its record agree
    (one write made both), and the array never holds more than HISTORY_LIMIT."""
    raw: MongoClient[dict[str, Any]] = MongoClient(mongo_url, tz_aware=True)
    leases = raw.get_default_database()["leases"]

    def stored() -> tuple[dict[str, Any], int, Any]:
        doc = leases.find_one({"_id": key})
        assert doc is not None
        events = doc.get("history") or []
        return doc, len(events), mongo_history.decode(key, events[-1]) if events else None

    try:
        for i in range(HISTORY_LIMIT // 2 + 1):
            holder = f'host "w\\{i}"\n\u00e9'  # quotes, backslash, newline, non-ASCII
            rec = mongo.acquire(key, holder, f"s{i}", 30, {"i": i}).record
            assert rec is not None
            doc, count, event = stored()
            assert (event.kind, event.token, event.holder, event.at, event.detail) == \
                ("acquired", doc["token"], doc["holder"], doc["acquired_at"], {"meta": {"i": i}})
            assert mongo.release(key, f"s{i}", rec.token)
            doc, count, event = stored()
            assert doc["holder"] is None and count == min(2 * i + 2, HISTORY_LIMIT)
            assert (event.kind, event.token, event.holder) == ("released", rec.token, holder)
        mongo.acquire(key, "last", "s", 30, {})
        broken = mongo.force_release(key, by="ops")
        doc, count, event = stored()
        assert broken is not None and count == HISTORY_LIMIT
        assert (event.kind, event.token, event.holder, event.at, event.detail) == \
            ("broken", broken.token, "last", doc["broken"]["at"], {"by": "ops", "meta": {}})
        assert [e.kind for e in mongo.history(key, limit=3)] == ["released", "acquired", "broken"]
    finally:
        raw.close()


def test_history_of_the_old_layout_is_read_not_moved(mongo_url: str, key: str) -> None:
    """A database written by an older version keeps its events in
    ``<collection>_events``: history() still shows them, in time order
    with the new ones, and nothing new is written there."""
    collection = f"old_{uuid.uuid4().hex[:8]}"
    raw: MongoClient[dict[str, Any]] = MongoClient(mongo_url)
    old = raw.get_default_database()[f"{collection}_events"]
    at = datetime.now(timezone.utc) - timedelta(hours=1)
    old.insert_many([{"key": key, "kind": kind, "token": 7, "holder": "old", "detail": {},
                      "at": at + timedelta(seconds=n)}
                     for n, kind in enumerate(("acquired", "released"))])
    try:
        with connect(with_option(mongo_url, f"collection={collection}")) as store:
            assert store.acquire(key, "new", "s", 30, {}).granted
            assert [(e.kind, e.holder) for e in store.history(key)] == \
                [("acquired", "old"), ("released", "old"), ("acquired", "new")]
            assert [e.kind for e in store.history(key, limit=2)] == ["released", "acquired"]
        assert old.count_documents({"key": key}) == 2
    finally:
        raw.close()


def test_a_paused_server_cannot_hang_a_call(private_mongo: MongoWireServer, key: str) -> None:
    url = with_option(private_mongo.url, "socketTimeoutMS=500&serverSelectionTimeoutMS=500")
    with connect(url) as store:
        rec = store.acquire(key, "alice", "alice", 30, {}).record
        assert rec is not None
        private_mongo.pause()
        try:
            with pytest.raises(StoreUnavailable):
                store.renew(key, "alice", rec.token, 30)
        finally:
            private_mongo.resume()
        deadline = time.monotonic() + 20
        while True:  # pymongo rediscovers the server in the background
            try:
                assert store.renew(key, "alice", rec.token, 30)
                break
            except StoreUnavailable:
                assert time.monotonic() < deadline
                time.sleep(0.1)


def test_counter_survives_a_server_restart(private_mongo: MongoWireServer, key: str) -> None:
    with connect(private_mongo.url) as store:
        tokens = []
        for name in ("a", "b", "c"):
            rec = store.acquire(key, name, name, 30, {}).record
            assert rec is not None
            tokens.append(rec.token)
            store.release(key, name, rec.token)
        private_mongo.stop()
        private_mongo.start()  # same port, same SQLite file
        # The wire server answers as a standalone server, so pymongo does not
        # retry writes: a write on a pooled connection to the old process
        # fails once (pymongo looks at a pooled connection only after a
        # second idle), and the next call connects afresh. Not what this test
        # is about: ask again, within a bound.
        deadline = time.monotonic() + 20
        while True:
            try:
                rec = store.acquire(key, "d", "d", 30, {}).record
                break
            except StoreUnavailable:
                assert time.monotonic() < deadline, "no acquire after the restart"
                time.sleep(0.1)
        assert rec is not None and rec.token > tokens[-1]
        assert tokens == sorted(set(tokens))


def test_store_works_in_a_forked_child_and_parent(mongo: LeaseStore, key: str) -> None:
    rec = mongo.acquire(key, "parent", "parent", 30, {}).record
    assert rec is not None
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: makes its own client (pymongo clients must not cross a fork)
        try:
            busy = mongo.acquire(key, "child", "child", 30, {})
            ok = not busy.granted and busy.record is not None and busy.record.holder == "parent"
            os.write(write, b"ok" if ok else b"bad")
        finally:
            os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    assert os.read(read, 16) == b"ok" and status == 0
    os.close(read)
    assert mongo.renew(key, "parent", rec.token, 30)
    assert mongo.release(key, "parent", rec.token)

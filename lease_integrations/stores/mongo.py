"""MongoDB store (pymongo): one document per key, one conditional write per
operation, judged on the server's ``$$NOW``.

Acquire is one ``find_one_and_update`` with ``upsert``: its filter matches
only a released or expired lease, and its pipeline update sets the new holder,
the next token and the expiry from ``$$NOW``. When the lease is held the
filter matches nothing, the upsert collides with the existing ``_id``
(``DuplicateKeyError``, code 11000) and the store reads the current record
with the server's time (an aggregate with ``$$NOW``). The document is never
deleted, so the token counter survives release, expiry and takeover; and
each token is floored by the server's clock (``$$NOW`` in milliseconds,
times 1000), so a lost document (a deleted one, a failover to a lagging
secondary) resumes above every earlier grant. The owner secret is a field
of the document that no read returns.

History is a capped array in the lease document, appended by the same
update that changes the lease (see ``mongo_history``): atomic with it, and
no extra send. Reads of records leave the array on the server.

Sends per operation: acquire granted 1, acquire busy 2 (the upsert that
collides, the read), renew 1, release 1, force_release 1, record_event 1,
get 1, history 1 (2 while a database made by an older version still has its
``<collection>_events``). Write concern defaults to majority (the
MongoDB-wire server accepts it).

MongoDB has no notification a waiter could block on without change streams
(which need a replica set), so ``notifies`` is False and waiters poll.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlencode, urlunsplit

from pymongo import MongoClient, ReturnDocument, common, uri_parser
from pymongo.errors import DuplicateKeyError, OperationFailure, PyMongoError

from ..core.config import mask_url, parse_url, query_items
from ..core.errors import ConfigurationError, CorruptRecord, StoreUnavailable
from ..core.record import AcquireResult, LeaseRecord, meta_from_json, parse_field
from ..core.store import (
    HISTORY_LIMIT,
    EventKind,
    EventList,
    LeaseEvent,
    LeaseStore,
    RecordList,
    readable_records,
)
from . import mongo_history as hist

log = logging.getLogger("lease_integrations")

COLLECTION_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,99}")
#: Bounds so that no call hangs; a URL that sets its own wins.
DEFAULT_TIMEOUTS_MS = {"serverSelectionTimeoutMS": 5000, "connectTimeoutMS": 5000,
                       "socketTimeoutMS": 5000}
#: Reads of records leave the history array on the server.
NO_HISTORY = {hist.FIELD: 0, hist.META_TEXT: 0}

#: Clients a forked child inherited: never used nor closed there.
_INHERITED: list[Any] = []

# A lease is free when released (holder null or missing) or expired by $$NOW.
# expires_at is always a BSON date: the MongoDB-wire test server has no type
# bracketing, so a null or number there would compare as "expired".
FREE = {"$or": [{"$eq": [{"$ifNull": ["$holder", None]}, None]},
                {"$lte": ["$expires_at", "$$NOW"]}]}
#: A scratch field of the acquire's update: the takeover's event text, made
#: in the stage that still sees the old holder, removed by the next stage.
TOOK_OVER_TMP = "_took_over"
#: max(last + 1, the server's clock in microseconds): $$NOW has milliseconds.
NEXT_TOKEN = {"$max": [{"$add": [{"$ifNull": ["$token", 0]}, 1]},
                       {"$multiply": [{"$toLong": "$$NOW"}, 1000]}]}


def _time(value: Any) -> datetime | None:
    if value is not None and not isinstance(value, datetime):
        raise ValueError(f"not a date: {type(value).__name__}")
    return value


def _token(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise ValueError(f"not an integer: {type(value).__name__}")
    return int(value)


def _record(doc: Mapping[str, Any], observed_at: Any = None) -> LeaseRecord:
    key = doc["_id"]
    holder = doc.get("holder")
    if holder is not None and not isinstance(holder, str):
        raise CorruptRecord(key, "holder", f"not a string: {type(holder).__name__}")
    return LeaseRecord(key, holder, parse_field(key, "token", _token, doc.get("token")),
                       parse_field(key, "acquired_at", _time, doc.get("acquired_at")),
                       parse_field(key, "renewed_at", _time, doc.get("renewed_at")),
                       parse_field(key, "expires_at", _time, doc.get("expires_at")),
                       observed_at or doc["observed_at"],
                       parse_field(key, "meta", meta_from_json, doc.get("meta")))


class MongoStore(LeaseStore):
    """Leases in a MongoDB collection (tested on mongoeco's MongoDB-wire
    server; see the README)."""

    notifies = False

    def __init__(self, uri: str, *, database: str, collection: str = "leases",
                 url: str | None = None, client_options: Mapping[str, Any] | None = None) -> None:
        self.url = mask_url(url or uri)
        if not isinstance(collection, str) or not COLLECTION_PATTERN.fullmatch(collection) \
                or ".." in collection:
            raise ConfigurationError(
                f"MongoDB collection name {collection!r} in {self.url!r} must start with a "
                "letter or underscore and use only letters, digits, '_', '-' and '.' "
                "(at most 100 characters)")
        self._uri = uri
        self.database = database
        self.collection_name = collection
        self._options = dict(client_options or {})
        self._lock = threading.Lock()
        self._legacy = False  # set by _prepare
        self._client: tuple[int, MongoClient[dict[str, Any]]] | None = None
        self._call(self._prepare)  # fail at connect, not mid-job

    # -- construction ------------------------------------------------------------
    @classmethod
    def from_url(cls, url: str, **options: Any) -> MongoStore:
        """``mongodb://user:pw@host:port/db?collection=leases&w=majority`` plus
        any pymongo URI option. Write concern defaults to majority, and server
        selection, connect and socket timeouts to 5 s."""
        parts = parse_url(url)
        query = query_items(parts.query)
        collection = str(options.pop("collection", "leases"))
        kept: list[tuple[str, str]] = []
        for name, value in query:
            if name == "collection":
                collection = value
            elif name.lower() not in common.VALIDATORS:
                raise ConfigurationError(
                    f"unknown option {name!r} in MongoDB store URL {mask_url(url)!r} "
                    "(use collection= or a pymongo URI option)")
            else:
                kept.append((name, value))
        uri = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(kept), ""))
        try:
            parsed = uri_parser.parse_uri(uri, warn=False)
        except (PyMongoError, ValueError) as exc:
            raise ConfigurationError(f"bad MongoDB store URL {mask_url(url)!r}: {exc}") from None
        database = parsed.get("database")
        if not database:
            raise ConfigurationError(
                f"MongoDB store URL {mask_url(url)!r} names no database; "
                "use mongodb://host:port/dbname")
        given = {name.lower() for name in parsed["options"]}
        client_options: dict[str, Any] = {
            name: ms for name, ms in DEFAULT_TIMEOUTS_MS.items() if name.lower() not in given}
        if "w" not in given:
            client_options["w"] = "majority"
        if "wtimeoutms" not in given:
            client_options["wTimeoutMS"] = 5000  # majority must not wait forever either
        client_options.update(options)
        return cls(uri, database=database, collection=collection, url=url,
                   client_options=client_options)

    # -- connection --------------------------------------------------------------
    def _collection(self) -> Any:
        """The collection on this process's client. pymongo clients must not
        cross a fork, so a child makes its own (lazily, by pid)."""
        with self._lock:
            if self._client is None or self._client[0] != os.getpid():
                if self._client is not None:
                    _INHERITED.append(self._client[1])
                client: MongoClient[dict[str, Any]] = MongoClient(
                    self._uri, tz_aware=True, tzinfo=timezone.utc, appname="lease_integrations",
                    **self._options)
                self._client = (os.getpid(), client)
            return self._client[1][self.database][self.collection_name]

    def _prepare(self, leases: Any) -> None:
        """Fail at connect, not mid-job; and note whether the database still
        holds history in the old layout (``<collection>_events``), which
        ``history()`` then reads too. A user allowed to read and write but
        not to list collections reads it too (a query of a missing
        collection finds nothing)."""
        try:
            self._legacy = bool(leases.database.list_collection_names(
                filter={"name": self._legacy_name()}))
        except OperationFailure as exc:
            if exc.code != 13:  # Unauthorized
                raise
            leases.database.command("ping")
            self._legacy = True

    def _call(self, op: Any) -> Any:
        try:
            return op(self._collection())
        except DuplicateKeyError:
            raise
        except OperationFailure as exc:
            detail = str(exc.details.get("errmsg") if exc.details else exc)
            if exc.code == 18 or "authentication failed" in detail.lower():
                detail += "; check the user and password in the store URL"
            elif exc.code == 13:
                detail += "; the user needs read and write access to the lease collections"
            raise StoreUnavailable(f"MongoDB refused: {detail}", url=self.url) from None
        except PyMongoError as exc:
            detail = " ".join(str(exc).split())[:500]
            raise StoreUnavailable(f"MongoDB error: {detail}", url=self.url) from None

    def _read(self, match: Mapping[str, Any]) -> RecordList:
        """Records with the server's time as ``observed_at``, in one round trip
        (the secret left on the server); unreadable ones reported apart."""
        pipeline = [{"$match": dict(match)}, {"$sort": {"_id": 1}},
                    {"$set": {"observed_at": "$$NOW"}},
                    {"$project": {"secret": 0, hist.FIELD: 0}}]
        docs = self._call(lambda c: list(c.aggregate(pipeline)))
        return readable_records(docs, _record)

    def _legacy_name(self) -> str:
        return f"{self.collection_name}_events"

    # -- protocol -----------------------------------------------------------------
    def acquire(self, key: str, holder: str, secret: str, ttl: float,
                meta: Mapping[str, Any]) -> AcquireResult:
        meta_doc = json.loads(json.dumps(dict(meta), default=str))  # plain JSON, as elsewhere
        update = [{"$set": {
            "holder": {"$literal": holder}, "secret": {"$literal": secret}, "token": NEXT_TOKEN,
            "acquired_at": "$$NOW", "renewed_at": "$$NOW",
            "expires_at": {"$add": ["$$NOW", int(ttl * 1000)]},
            "meta": {"$literal": meta_doc},
            # The meta as JSON text too, for the release's and break's events
            # (a pipeline cannot write a sub-document as JSON text).
            hist.META_TEXT: hist.as_json(meta_doc),
            # Read from the document as it was (one stage sees its input): a
            # holder still named here expired while held and is taken over.
            TOOK_OVER_TMP: hist.TOOK_OVER_OF_DOC,
        }}, {"$set": {hist.FIELD: hist.append(  # reads the token just set
            "acquired", hist.TOKEN_OF_DOC, hist.as_json(holder), {"meta": meta_doc},
            f"${TOOK_OVER_TMP}"), TOOK_OVER_TMP: "$$REMOVE"}}]
        try:
            doc = self._call(lambda c: c.find_one_and_update(
                {"_id": key, "$expr": FREE}, update, projection=NO_HISTORY, upsert=True,
                return_document=ReturnDocument.AFTER))
        except DuplicateKeyError:
            doc = None  # held: the upsert collided with the existing document
        if doc is not None and doc.get("secret") == secret:
            return AcquireResult(True, _record(doc, doc["acquired_at"]))
        current = self._read({"_id": key})
        if current.unreadable:
            raise current.unreadable[0]
        return AcquireResult(False, current[0] if current else None)

    def renew(self, key: str, secret: str, token: int, ttl: float) -> bool:
        update = [{"$set": {"renewed_at": "$$NOW",
                            "expires_at": {"$add": ["$$NOW", int(ttl * 1000)]}}}]
        result = self._call(lambda c: c.update_one(
            {"_id": key, "secret": secret, "token": token,
             "$expr": {"$gt": ["$expires_at", "$$NOW"]}}, update))
        return bool(result.matched_count == 1)

    def release(self, key: str, secret: str, token: int) -> bool:
        # The first stage records the holder before the second clears it.
        update = [{"$set": {hist.FIELD: hist.append(
                      "released", str(int(token)), hist.HOLDER_OF_DOC, {}, hist.meta_of_doc(""))}},
                  {"$set": {"holder": None, "secret": None}}]
        result = self._call(lambda c: c.update_one(
            {"_id": key, "secret": secret, "token": token}, update))
        return bool(result.matched_count == 1)

    def get(self, key: str) -> LeaseRecord | None:
        found = self._read({"_id": key})
        if found.unreadable:
            raise found.unreadable[0]
        return found[0] if found else None

    def force_release(self, key: str, by: str, token: int | None = None) -> LeaseRecord | None:
        # The stages read "$holder" before they clear it: the document keeps
        # who was broken, when (server clock) and by whom, and so does history.
        # With a token the filter carries the check, so check and break are
        # the one conditional write.
        match: dict[str, Any] = {"_id": key}
        if token is not None:
            match.update(token=int(token), holder={"$ne": None})
        update = [{"$set": {hist.FIELD: hist.append(
                      "broken", hist.TOKEN_OF_DOC, hist.HOLDER_OF_DOC, {"by": by},
                      hist.meta_of_doc(",")),
                    "broken": {"holder": "$holder", "at": "$$NOW", "by": {"$literal": by}}}},
                  {"$set": {"holder": None, "secret": None}}]
        doc = self._call(lambda c: c.find_one_and_update(
            match, update, projection=NO_HISTORY, return_document=ReturnDocument.AFTER))
        if doc is None:
            return None
        broken = doc["broken"]
        return _record({**doc, "holder": broken.get("holder")}, broken["at"])

    def history(self, key: str, limit: int = 50) -> list[LeaseEvent]:
        limit = min(int(limit), HISTORY_LIMIT)
        if limit <= 0:
            return EventList()
        pipeline = [{"$match": {"_id": key}}, {"$project": {
            "_id": 0, "events": {"$slice": [{"$ifNull": [f"${hist.FIELD}", []]}, -limit]}}}]

        def read(leases: Any) -> tuple[list[Any], EventList]:
            docs = list(leases.aggregate(pipeline))
            old = hist.legacy_events(leases.database[self._legacy_name()], key, limit) \
                if self._legacy else EventList()
            return (docs[0]["events"] if docs else []), old

        stored, old = self._call(read)
        return hist.merged(hist.events(key, stored), old, limit)

    def record_event(self, key: str, kind: EventKind, holder: str | None, token: int,
                     detail: Mapping[str, Any] | None = None) -> None:
        update = [{"$set": {hist.FIELD: hist.append(
            kind, str(int(token)), hist.as_json(holder), detail or {})}}]
        result = self._call(lambda c: c.update_one({"_id": key}, update))
        if result.matched_count == 0:  # no document to hold it: the store lost it
            log.warning("lease %s has no document in %s: its %s event (token %s, holder %s) "
                        "is only in this log", key, self.url, kind, token, holder)

    # Defined after every method annotated with ``list[...]`` (it shadows the builtin).
    def list(self, prefix: str = "") -> RecordList:
        return self._read({"_id": {"$regex": "^" + re.escape(prefix)}})

    def close(self) -> None:
        with self._lock:
            if self._client is not None and self._client[0] == os.getpid():
                self._client[1].close()
            self._client = None

    def __repr__(self) -> str:
        return f"<MongoStore {self.url} collection={self.collection_name}>"

"""A bucket as the lease store: ``s3://bucket/prefix``.

For teams whose only shared infrastructure is a bucket, and for jobs on
machines that reach no Redis or database. One object per key
(``<prefix>/leases/<key, percent-encoded>``) holds the whole record as JSON:
holder, a hash of the owner secret, token, ttl, meta and the key's last
``HISTORY_LIMIT`` events. Every change is one conditional PutObject on the
ETag the change read (``If-None-Match: *`` for a new key), so two writers
never both succeed from the same version; every body carries a fresh nonce,
so no version's ETag (an MD5 of the body) ever comes back (no ABA). The
object is never deleted; the token only rises (one above the record's,
floored by the writer's clock in microseconds, so a record an operator
deleted never grants a token again unless the clocks went back).

Whose clock judges expiry. Not the caller's wall clock. A version of the
record is expired when EITHER of two clocks says so, each counted against
the taker:

- the store's: its ``Date`` on the answer of the read, against the
  version's ``Last-Modified``, both in whole seconds: expired when
  ``Date >= Last-Modified + ttl + 1 s`` (the version was written at most a
  second after its ``Last-Modified`` says);
- the contender's own: this process timing an unchanged version (the same
  ETag) for a full ttl on its monotonic clock, from the answer of the read
  that first showed it.

Both err late, never early, so a holder whose trust window closes on its own
clock (start of its renew attempt + ttl - margin) is gone before either
says expired. (The store's rule assumes the store's own hosts, which stamp
``Last-Modified`` and ``Date``, agree on the time to well within the
holder's margin, ttl/5 by default; the contender's rule assumes nothing of
any wall clock.) What a takeover costs: a record that a crashed holder left
behind is taken over between ttl and ttl + 2 s of the store's time after its
last write, or, if the store's clock is behind, one ttl after a contender
first saw it. A process that never saw the version (the keeper, leasectl)
starts timing it at its first read.

The store must honour conditional writes: ``connect()`` runs the probe
(``core.fencing.probe``) once per bucket and process and refuses a store that
ignores them. Waiters poll (no notification channel).
"""

from __future__ import annotations

import builtins
import hashlib
import json
import threading
import time
import uuid
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import quote, unquote

from ..core.errors import ConfigurationError, CorruptRecord, StoreUnavailable
from ..core.fencing.probe import require_conditions
from ..core.fencing.s3 import Bucket, Place, Refused, Stored, parse_place
from ..core.record import AcquireResult, LeaseRecord, parse_field
from ..core.store import (
    HISTORY_LIMIT,
    TOOK_OVER,
    EventKind,
    EventList,
    LeaseEvent,
    LeaseStore,
    RecordList,
    checked_event,
    readable_events,
    readable_records,
)

RECORDS = "leases/"
#: Conditional writes retried after a refusal (another writer got in first)
#: before the call gives up with ``StoreUnavailable``.
ATTEMPTS = 8
SLACK = timedelta(seconds=1)  # Last-Modified and Date are whole seconds


def _hash(secret: str) -> str:
    """The record keeps a hash of the owner secret: whoever can read the
    bucket sees the record, and nothing in it renews or releases the lease."""
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(frozen=True)
class _Body:
    key: str
    holder: str | None
    secret: str | None
    token: int
    ttl: float
    acquired_at: str | None
    meta: dict[str, Any]
    events: list[list[Any]] = field(default_factory=list)

    def encode(self) -> bytes:
        return json.dumps({"format": 1, "nonce": uuid.uuid4().hex, "key": self.key,
                           "holder": self.holder, "secret": self.secret, "token": self.token,
                           "ttl": self.ttl, "acquired_at": self.acquired_at, "meta": self.meta,
                           "events": self.events[-HISTORY_LIMIT:]}, default=str).encode()

    def with_event(self, kind: str, token: int, holder: str | None, at: datetime,
                   detail: Mapping[str, Any] | None = None) -> list[list[Any]]:
        return [*self.events, [kind, token, holder, at.isoformat(), dict(detail or {})]]

    def stamp(self, date: datetime) -> datetime:
        """The time of a change read at the store's ``date``: the store's second
        refined by this process's clock (clamped into that second), and never
        before the key's last event, so events keep their order. The store's
        clock has whole seconds only, and the history checker compares grants
        to the ttl, which may be shorter."""
        at = min(max(datetime.now(timezone.utc), date), date + SLACK - timedelta(microseconds=1))
        if self.events:
            with suppress(ValueError, TypeError, IndexError):
                at = max(at, datetime.fromisoformat(self.events[-1][3]))
        return at


def _parse(key: str, stored: Stored) -> _Body:
    data = parse_field(key, "record", json.loads, stored.body)
    if not isinstance(data, dict):
        raise CorruptRecord(key, "record", "not a JSON object")
    token = data.get("token")
    if isinstance(token, bool) or not isinstance(token, int) or token < 0:
        raise CorruptRecord(key, "token", f"{str(token)[:40]!r} is not a token")
    ttl = data.get("ttl")
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not ttl >= 0:
        raise CorruptRecord(key, "ttl", f"{str(ttl)[:40]!r} is not a number of seconds")
    holder, secret, meta, events = (data.get(n) for n in ("holder", "secret", "meta", "events"))
    for name, value, kind in (("holder", holder, str), ("secret", secret, str)):
        if value is not None and not isinstance(value, kind):
            raise CorruptRecord(key, name, f"expected text, found {type(value).__name__}")
    if not isinstance(meta, dict):
        raise CorruptRecord(key, "meta", "not a JSON object")
    if not isinstance(events, list):
        raise CorruptRecord(key, "events", "not a JSON list")
    return _Body(key, holder, secret, token, float(ttl), data.get("acquired_at"), meta, events)


class S3Store(LeaseStore):
    """Leases kept in one object per key, changed by conditional writes."""

    notifies = False

    def __init__(self, place: Place) -> None:
        self.place = place
        self.url = place.url
        self._bucket = Bucket(place)
        self._seen: dict[str, tuple[str, float]] = {}  # key -> (ETag, monotonic first seen)
        self._seen_lock = threading.Lock()

    @classmethod
    def from_url(cls, url: str, **options: Any) -> S3Store:
        if options:
            raise ConfigurationError(f"s3:// takes no options, got {sorted(options)}")
        store = cls(parse_place(url, "store URL"))
        require_conditions(store._bucket)
        return store

    def close(self) -> None:
        self._bucket.close()

    # -- names, clocks, records ------------------------------------------------------
    def _name(self, key: str) -> str:
        return f"{self.place.prefix}{RECORDS}{quote(key, safe='')}"

    def _saw(self, key: str, etag: str) -> float:
        """When this process first saw this version of the key (monotonic)."""
        now = time.monotonic()
        with self._seen_lock:
            seen = self._seen.get(key)
            if seen is None or seen[0] != etag:
                seen = self._seen[key] = (etag, now)
            return seen[1]

    def _wrote(self, key: str, etag: str) -> None:
        with self._seen_lock:
            self._seen[key] = (etag, time.monotonic())

    def _remaining(self, key: str, stored: Stored, body: _Body) -> float:
        """Seconds until the version expires: the sooner of the two clocks."""
        first = self._saw(key, stored.etag)
        by_us = body.ttl - (time.monotonic() - first)
        by_store = (stored.modified + SLACK + timedelta(seconds=body.ttl) - stored.date)
        return min(by_us, by_store.total_seconds())

    def _record(self, key: str, stored: Stored, body: _Body) -> LeaseRecord:
        expires = None
        if body.holder is not None:
            expires = stored.date + timedelta(seconds=self._remaining(key, stored, body))
        acquired = parse_field(key, "acquired_at", _time, body.acquired_at)
        # The version's write, in whole seconds; never before the grant's own stamp.
        renewed = max(stored.modified, acquired) if acquired is not None else stored.modified
        return LeaseRecord(key, body.holder, body.token, acquired, renewed, expires,
                           stored.date, dict(body.meta))

    def _read(self, key: str) -> tuple[Stored | None, _Body | None, datetime]:
        stored, date = self._bucket.read(self._name(key))
        return stored, (_parse(key, stored) if stored is not None else None), date

    def _write(self, key: str, body: _Body, stored: Stored | None) -> bool:
        """One conditional write over ``stored`` (or none). True: written.
        False: refused (another writer got in first: the caller reads and
        decides again). Unanswered: read back, and if the write is not there,
        ``StoreUnavailable`` (it may still land; its condition keeps it from
        landing over anyone else's change).

        A refusal is read back too: boto3 retries a write whose answer was
        lost, and the retry's condition is false because of the very write it
        repeats. The body's nonce makes "the object is my payload" mean "my
        write landed"."""
        payload = body.encode()
        try:
            etag, _ = self._bucket.put(self._name(key), payload, if_none_match=stored is None,
                                       if_match=stored.etag if stored is not None else None)
        except (Refused, StoreUnavailable) as failure:
            now = self._bucket.get(self._name(key))  # did it land before the answer was lost?
            if now is None or now.body != payload:
                if isinstance(failure, Refused):
                    return False
                raise
            etag = now.etag
        self._wrote(key, etag)
        return True

    # -- protocol ---------------------------------------------------------------------
    def acquire(self, key: str, holder: str, secret: str, ttl: float,
                meta: Mapping[str, Any]) -> AcquireResult:
        for _ in range(ATTEMPTS):
            stored, body, date = self._read(key)
            detail: dict[str, Any] = {"meta": dict(meta)}
            if stored is not None and body is not None and body.holder is not None:
                if self._remaining(key, stored, body) > 0:
                    return AcquireResult(False, self._record(key, stored, body))
                detail[TOOK_OVER] = {"token": body.token, "holder": body.holder}
            token = max((body.token if body else 0) + 1, time.time_ns() // 1000)
            previous = body or _Body(key, None, None, 0, 0.0, None, {})
            at = previous.stamp(date)
            new = _Body(key, holder, _hash(secret), token, float(ttl), at.isoformat(),
                        dict(meta), previous.with_event("acquired", token, holder, at, detail))
            if self._write(key, new, stored):
                return AcquireResult(True, LeaseRecord(
                    key, holder, token, at, at, at + timedelta(seconds=ttl), at,
                    json.loads(json.dumps(dict(meta), default=str))))
        # Every try found the key free and lost it to another taker's write:
        # busy, as if one of them still held it. The waiting above decides.
        return AcquireResult(False, None)

    def renew(self, key: str, secret: str, token: int, ttl: float) -> bool:
        for _ in range(ATTEMPTS):
            stored, body, _ = self._read(key)
            if stored is None or body is None or body.holder is None \
                    or body.secret != _hash(secret) or body.token != token \
                    or self._remaining(key, stored, body) <= 0:
                return False
            if self._write(key, replace(body, ttl=float(ttl)), stored):
                return True
        raise StoreUnavailable(f"renew of {key!r} kept meeting other writers", url=self.url)

    def release(self, key: str, secret: str, token: int) -> bool:
        for _ in range(ATTEMPTS):
            stored, body, date = self._read(key)
            if stored is None or body is None or body.holder is None \
                    or body.secret != _hash(secret) or body.token != token:
                return False
            # The grant's meta goes with the release, as with the break: it
            # places the event once its ``acquired`` event is trimmed.
            events = body.with_event("released", body.token, body.holder, body.stamp(date),
                                     {"meta": dict(body.meta)})
            if self._write(key, replace(body, holder=None, secret=None, events=events), stored):
                return True
        raise StoreUnavailable(f"release of {key!r} kept meeting other writers", url=self.url)

    def get(self, key: str) -> LeaseRecord | None:
        stored, body, _ = self._read(key)
        return None if stored is None or body is None else self._record(key, stored, body)

    def list(self, prefix: str = "") -> RecordList:
        start = f"{self.place.prefix}{RECORDS}"
        keys = [unquote(name[len(start):]) for name in self._bucket.names(start + quote(prefix, safe=""))]
        return readable_records(keys, self.get)

    def force_release(self, key: str, by: str, token: int | None = None) -> LeaseRecord | None:
        for _ in range(ATTEMPTS):
            stored, body, date = self._read(key)
            if stored is None or body is None:
                return None
            if token is not None and (body.token != token or body.holder is None):
                return None
            before = self._record(key, stored, body)
            events = body.with_event("broken", body.token, body.holder, body.stamp(date),
                                     {"by": by, "meta": dict(body.meta)})
            if self._write(key, replace(body, holder=None, secret=None, events=events), stored):
                return before
        raise StoreUnavailable(f"break of {key!r} kept meeting other writers", url=self.url)

    def history(self, key: str, limit: int = 50) -> builtins.list[LeaseEvent]:
        body = self._read(key)[1]
        if body is None:
            return EventList()
        return readable_events(body.events[-limit:] if limit > 0 else [],
                               lambda row: _event(key, row))

    def record_event(self, key: str, kind: EventKind, holder: str | None, token: int,
                     detail: Mapping[str, Any] | None = None) -> None:
        for _ in range(ATTEMPTS):
            stored, body, date = self._read(key)
            if stored is None or body is None:
                return
            # A write that renews nothing keeps the version's expiry where it was:
            # the new version's ttl is what was left of the old one's.
            ttl = max(0.0, self._remaining(key, stored, body)) if body.holder else body.ttl
            events = body.with_event(kind, token, holder, body.stamp(date), detail)
            if self._write(key, replace(body, ttl=ttl, events=events), stored):
                return


def _time(text: Any) -> datetime | None:
    if text is None:
        return None
    value = datetime.fromisoformat(text)
    if value.tzinfo is None:
        raise ValueError("a time without a zone")
    return value


def _event(key: str, row: Any) -> LeaseEvent:
    if not isinstance(row, list) or len(row) != 5:
        raise CorruptRecord(key, "event", "not a list of five fields")
    kind, token, holder, at, detail = row
    return checked_event(key, kind, token, holder, parse_field(key, "event at", _time, at), detail)

"""In-process store for tests and demos: leases shared by every ``connect``
of the same ``memory://name`` in one process, nothing across processes."""

from __future__ import annotations

import builtins
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, ClassVar

from ..core.config import parse_url, query_options
from ..core.errors import ConfigurationError
from ..core.record import AcquireResult, LeaseRecord
from ..core.store import (
    HISTORY_LIMIT,
    TOOK_OVER,
    EventKind,
    EventList,
    LeaseEvent,
    LeaseStore,
    RecordList,
)


@dataclass
class _Row:
    holder: str | None
    secret: str | None  # the owner secret: compared, never returned
    token: int
    acquired_at: datetime
    renewed_at: datetime
    expires_mono: float  # expiry on the monotonic clock: immune to wall-clock jumps
    meta: dict[str, Any]
    events: deque[LeaseEvent] = field(default_factory=lambda: deque(maxlen=HISTORY_LIMIT))


class MemoryStore(LeaseStore):
    notifies = True
    opens_elsewhere = False  # its leases live in this process only
    _named: ClassVar[dict[str, MemoryStore]] = {}
    _named_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, name: str = "default") -> None:
        self.name = name
        self.url = f"memory://{name}"
        self._rows: dict[str, _Row] = {}
        # The counter lives apart from the rows, so losing a row never resets it.
        self._tokens: dict[str, int] = {}
        self._cond = threading.Condition()

    @classmethod
    def from_url(cls, url: str, **options: Any) -> MemoryStore:
        if options:
            raise ConfigurationError(f"memory:// takes no options, got {sorted(options)}")
        parts = parse_url(url)
        query_options(parts, {}, url)
        name = (parts.netloc + parts.path).strip("/") or "default"
        with cls._named_lock:
            store = cls._named.get(name)
            if store is None:
                store = cls._named[name] = cls(name)
            return store

    # -- clock ------------------------------------------------------------------
    @staticmethod
    def _now() -> tuple[datetime, float]:
        return datetime.now(timezone.utc), time.monotonic()

    def _record(self, key: str, row: _Row, now: datetime, mono: float) -> LeaseRecord:
        expires_at = now + timedelta(seconds=row.expires_mono - mono)
        return LeaseRecord(key, row.holder, row.token, row.acquired_at, row.renewed_at,
                           expires_at, now, dict(row.meta))

    @staticmethod
    def _event(row: _Row, key: str, kind: EventKind, holder: str | None, at: datetime,
               detail: Mapping[str, Any] | None = None) -> None:
        row.events.append(LeaseEvent(key, kind, row.token, holder, at, dict(detail or {})))

    # -- protocol ---------------------------------------------------------------
    def acquire(self, key: str, holder: str, secret: str, ttl: float,
                meta: Mapping[str, Any]) -> AcquireResult:
        now, mono = self._now()
        with self._cond:
            row = self._rows.get(key)
            if row is not None and row.holder is not None and row.expires_mono > mono:
                return AcquireResult(False, self._record(key, row, now, mono))
            if row is None:
                row = self._rows[key] = _Row(None, None, 0, now, now, mono, {})
            detail: dict[str, Any] = {"meta": dict(meta)}
            if row.holder is not None:  # held but expired: an expiry takeover
                detail[TOOK_OVER] = {"token": row.token, "holder": row.holder}
            # floored by the clock in microseconds, as the other stores: a
            # fenced resource that outlives this process never sees a token again
            token = self._tokens[key] = max(max(self._tokens.get(key, 0), row.token) + 1,
                                            time.time_ns() // 1000)
            row.holder, row.secret, row.token = holder, secret, token
            row.acquired_at = row.renewed_at = now
            row.expires_mono = mono + ttl
            row.meta = dict(meta)
            self._event(row, key, "acquired", holder, now, detail)
            return AcquireResult(True, self._record(key, row, now, mono))

    def renew(self, key: str, secret: str, token: int, ttl: float) -> bool:
        now, mono = self._now()
        with self._cond:
            row = self._rows.get(key)
            if row is None or row.holder is None or row.secret != secret \
                    or row.token != token or row.expires_mono <= mono:
                return False
            row.renewed_at = now
            row.expires_mono = mono + ttl
            return True

    def release(self, key: str, secret: str, token: int) -> bool:
        now, _ = self._now()
        with self._cond:
            row = self._rows.get(key)
            if row is None or row.holder is None or row.secret != secret or row.token != token:
                return False
            holder, row.holder, row.secret = row.holder, None, None
            self._event(row, key, "released", holder, now, {"meta": dict(row.meta)})
            self._cond.notify_all()
            return True

    def get(self, key: str) -> LeaseRecord | None:
        now, mono = self._now()
        with self._cond:
            row = self._rows.get(key)
            return None if row is None else self._record(key, row, now, mono)

    def list(self, prefix: str = "") -> RecordList:
        now, mono = self._now()
        with self._cond:
            return RecordList(self._record(k, r, now, mono) for k, r in sorted(self._rows.items())
                              if k.startswith(prefix))

    def force_release(self, key: str, by: str, token: int | None = None) -> LeaseRecord | None:
        now, mono = self._now()
        with self._cond:
            row = self._rows.get(key)
            if row is None or (token is not None and (row.token != token or row.holder is None)):
                return None
            before = self._record(key, row, now, mono)
            row.holder = row.secret = None
            self._event(row, key, "broken", before.holder, now, {"by": by, "meta": dict(row.meta)})
            self._cond.notify_all()
            return before

    def history(self, key: str, limit: int = 50) -> builtins.list[LeaseEvent]:
        with self._cond:
            row = self._rows.get(key)
            return EventList([] if row is None else list(row.events)[-limit:])

    def record_event(self, key: str, kind: EventKind, holder: str | None, token: int,
                     detail: Mapping[str, Any] | None = None) -> None:
        now, _ = self._now()
        with self._cond:
            row = self._rows.get(key)
            if row is not None:
                row.events.append(LeaseEvent(key, kind, token, holder, now, dict(detail or {})))

    def wait_for_release(self, key: str, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait(timeout) if timeout > 0 else False

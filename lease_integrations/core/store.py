"""The store protocol: the strict cut between "where a lease lives" and "how a
lease is used".

Below the cut a store speaks plain primitives (key, holder, secret, token,
ttl, meta) and returns plain records; it judges expiry on its own clock and makes every
write one atomic conditional operation. Above the cut, ``LeaseLock`` owns
waiting, heartbeats, trust windows and policies. Keeping the cut strict is what
lets one conformance suite prove every store equal.
"""

from __future__ import annotations

import builtins
import json
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, TypeVar, get_args

from .errors import CorruptRecord
from .record import AcquireResult, LeaseRecord, parse_field

T = TypeVar("T")
#: ``superseded``: a run replaced the holder (``keeper/supersede``); recorded after
#: the break, naming the new holder (``detail["by"]``) and its meta.
EventKind = Literal["acquired", "released", "broken", "lost", "superseded"]
EVENT_KINDS: frozenset[str] = frozenset(get_args(EventKind))

#: One renewal of a batch: (key, secret, token, ttl).
RenewItem = tuple[str, str, int, float]

#: The ``acquired`` event's detail key naming the lease an acquire took over
#: because it had expired while still held (its holder never released it: a
#: crash, a freeze, a lost network): ``{"token": <old token>, "holder": <old
#: public holder>}``. Absent when the key was free (released, broken, new).
#: Every store writes it in the acquire's own atomic step, so a takeover is
#: never missing from the history and never recorded without its grant.
TOOK_OVER = "took_over"

#: How many history events a store keeps per key before trimming the oldest.
HISTORY_LIMIT = 100


class RecordList(builtins.list[LeaseRecord]):
    """What ``list()`` returns: the readable records, sorted by key, plus
    ``unreadable``: one ``CorruptRecord`` per key whose stored record could
    not be parsed (a garbage field written by hand). Skip-and-report, so one
    bad key never hides every other key from the operator's console; the
    console shows these keys as unreadable (``get(key)`` raises the same
    ``CorruptRecord`` for one of them)."""

    def __init__(self, records: Iterable[LeaseRecord] = (),
                 unreadable: Iterable[CorruptRecord] = ()) -> None:
        super().__init__(records)
        self.unreadable: builtins.list[CorruptRecord] = builtins.list(unreadable)


@dataclass(frozen=True)
class LeaseEvent:
    """One line of a key's history, as the store recorded it (its clock)."""

    key: str
    kind: EventKind
    token: int
    holder: str | None
    at: datetime
    detail: dict[str, Any] = field(default_factory=dict)


class LeaseStore(ABC):
    """Base class of every store. A store file is one subclass and its queries.

    Every method may raise ``StoreUnavailable`` (with the masked URL) when the
    store cannot be reached; none may hang without bound.
    """

    #: The URL with any password masked; safe to print and log.
    url: str = ""
    #: True when ``wait_for_release`` is woken by the store on release
    #: (pub/sub, LISTEN/NOTIFY, a condition variable) rather than polling.
    notifies: bool = False
    #: True when ``renew_many`` makes one round trip for the whole batch; the
    #: heartbeat batches only then (otherwise parallel single renewals on its
    #: pool are faster, and one slow call does not hold back the others).
    batch_renewals: bool = False
    #: True when a second process opening the same URL reaches the same
    #: leases (every store but ``memory://``): the keeper process can then
    #: renew them (``keeper.client``).
    opens_elsewhere: bool = True

    def url_elsewhere(self, url: str) -> str:
        """``url`` (as given to ``connect``) as another process must open it
        to reach these same leases: the same, unless it depends on this
        process (a path relative to its working directory)."""
        return url

    @abstractmethod
    def acquire(
        self, key: str, holder: str, secret: str, ttl: float, meta: Mapping[str, Any]
    ) -> AcquireResult:
        """One atomic conditional write. Grants iff there is no record, the
        record was released, or it expired by the store's clock; then the new
        token is greater than every token the key was ever granted (see
        docs/concepts/tokens-and-identity.md for each store's mechanism). On
        busy, returns the current record.

        The ``acquired`` event it records carries ``detail["meta"]`` and, when
        the grant took over a lease that expired while held, ``detail[TOOK_OVER]``
        naming the token and holder it replaced (written by the same atomic
        step, at no extra round trip).

        ``holder`` is the public name (shown to everyone); ``secret`` is the
        owner secret that renew and release must present. The store keeps the
        secret but never returns it (not from get, list, history, nor in a
        busy record), so nothing a contender can see lets it act as the holder."""

    @abstractmethod
    def renew(self, key: str, secret: str, token: int, ttl: float) -> bool:
        """Extend to now + ttl iff secret and token match and the lease has not
        expired. False means the lease is gone for good: never resurrected."""

    def renew_many(self, items: Sequence[RenewItem]) -> Sequence[bool | None]:
        """Renew several leases, each judged on its own exactly as ``renew``
        would: the result has one outcome per item, in order, and a refused
        item (False) loses only that lease. The heartbeat calls this with every
        lease of one store that falls due in the same tick, so a store with a
        batch form (one script, one statement) makes that one round trip instead
        of one per lease. The default loops over ``renew``. An exception means
        the whole batch failed transiently (the caller retries each lease); None
        for an item means the same for that item alone (a store spread over
        several servers, one of which did not answer: a Redis Cluster node)."""
        return [self.renew(key, secret, token, ttl) for key, secret, token, ttl in items]

    @abstractmethod
    def release(self, key: str, secret: str, token: int) -> bool:
        """Clear the holder iff secret and token match; keep the token counter.
        Wakes waiters where the store can notify."""

    @abstractmethod
    def get(self, key: str) -> LeaseRecord | None:
        """The key's record in whatever state (held, expired, released), or
        None when the key was never acquired. Raises ``CorruptRecord`` (naming
        the key and the field) when the stored record cannot be parsed; so does
        ``acquire`` of such a key, rather than granting over garbage."""

    @abstractmethod
    def list(self, prefix: str = "") -> builtins.list[LeaseRecord]:
        """Every readable record whose key starts with ``prefix``, sorted by
        key. Returns a ``RecordList``: a key whose record cannot be parsed is
        left out of the list and reported in its ``unreadable`` attribute."""

    @abstractmethod
    def force_release(self, key: str, by: str, token: int | None = None) -> LeaseRecord | None:
        """The operator's break: clear the holder whoever it is, keep the
        counter, record who broke it (a ``broken`` event with ``by``).
        Returns the record as it was before, or None when there was no
        record. The only path that touches another holder's lease.

        With ``token``, the break is conditional and atomic in the store: it
        happens only if the record still carries that token and a holder, so
        an operator who looked at token 7 never breaks token 8 that a new
        holder took since (the look and the break are two calls; a check in
        between would race). Then None means nothing was broken (no record,
        another token, or already released): ``get`` tells which."""

    @abstractmethod
    def history(self, key: str, limit: int = 50) -> builtins.list[LeaseEvent]:
        """The key's most recent events, oldest first (at most ``limit``).
        Returns an ``EventList``: an event that cannot be parsed (written by
        hand) is left out and reported in its ``unreadable`` attribute."""

    @abstractmethod
    def record_event(
        self, key: str, kind: EventKind, holder: str | None, token: int,
        detail: Mapping[str, Any] | None = None,
    ) -> None:
        """Append an event the holder observed (a lost lease). Best effort."""

    def wait_for_release(self, key: str, timeout: float) -> bool:
        """Block until the key may have been released, or ``timeout`` passes.

        Returns True when woken by a notification. The default polls (sleeps);
        stores with a notification channel override it. Callers always retry
        ``acquire`` afterwards, so a spurious wake-up is harmless."""
        if timeout > 0:
            time.sleep(timeout)
        return False

    def close(self) -> None:  # noqa: B027 - optional hook, stores without resources skip it
        """Release connections. Idempotent."""

    def __enter__(self) -> LeaseStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def end_of_token(events: Sequence[LeaseEvent], token: int) -> LeaseEvent | None:
    """The event that ended ``token`` (its ``released`` or ``broken``), read
    newest first and no further back than its grant; None when the history
    shows neither. One reading of "why is this lease no longer mine", shared
    by the renewer that was refused and the Airflow DAG-run keeper."""
    for event in reversed(events):
        if event.token != token:
            continue
        if event.kind in ("released", "broken"):
            return event
        if event.kind == "acquired":
            return None
    return None


def readable_records(rows: Iterable[T], parse: Callable[[T], LeaseRecord | None]) -> RecordList:
    """Parse a store's raw rows into a ``RecordList``: rows that raise
    ``CorruptRecord`` are reported in ``unreadable`` instead of failing the
    whole listing; rows that parse to None (no record) are dropped."""
    good: builtins.list[LeaseRecord] = []
    bad: builtins.list[CorruptRecord] = []
    for row in rows:
        try:
            record = parse(row)
        except CorruptRecord as exc:
            bad.append(exc)
            continue
        if record is not None:
            good.append(record)
    good.sort(key=lambda r: r.key)
    return RecordList(good, bad)


class EventList(builtins.list[LeaseEvent]):
    """What ``history()`` returns: the readable events, plus ``unreadable``:
    one ``CorruptRecord`` per stored event that could not be parsed. The
    same skip-and-report as ``RecordList``, for the same reason: an event
    written by hand must not hide the key's whole history (nor answer 500)."""

    def __init__(self, events: Iterable[LeaseEvent] = (),
                 unreadable: Iterable[CorruptRecord] = ()) -> None:
        super().__init__(events)
        self.unreadable: builtins.list[CorruptRecord] = builtins.list(unreadable)


def readable_events(rows: Iterable[T], parse: Callable[[T], LeaseEvent]) -> EventList:
    """Parse a store's raw event rows, in order, into an ``EventList``."""
    good: builtins.list[LeaseEvent] = []
    bad: builtins.list[CorruptRecord] = []
    for row in rows:
        try:
            good.append(parse(row))
        except CorruptRecord as exc:
            bad.append(exc)
    return EventList(good, bad)


def checked_event(key: str, kind: Any, token: Any, holder: Any, at: Any, detail: Any) -> LeaseEvent:
    """An event from a store's raw fields, each checked the way a record's
    fields are (``parse_field``: ``CorruptRecord`` naming the field). ``at``
    must already be a time; ``detail`` may still be JSON text."""
    return LeaseEvent(key, parse_field(key, "event kind", _event_kind, kind),
                      parse_field(key, "event token", _event_token, token),
                      parse_field(key, "event holder", _optional_text, holder),
                      parse_field(key, "event at", _aware_time, at),
                      parse_field(key, "event detail", _event_detail, detail))


def _event_kind(value: Any) -> EventKind:
    if value not in EVENT_KINDS:
        raise ValueError(f"unknown event kind {str(value)[:40]!r}")
    kind: EventKind = value
    return kind


def _event_token(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str, bytes)):
        raise TypeError(f"a token is an integer, found {type(value).__name__}")
    return int(value)


def _optional_text(value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"expected text, found {type(value).__name__}")
    return value


def _aware_time(value: Any) -> datetime:
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise TypeError(f"expected a time with a zone, found {type(value).__name__}")
    return value


def _event_detail(value: Any) -> dict[str, Any]:
    """A JSON object whose ``meta`` (when present) is an object too and whose
    ``by`` is text: what every reader of an event relies on."""
    if value is None or value == "":
        return {}
    if isinstance(value, (str, bytes)):
        value = json.loads(value)
    if not isinstance(value, dict):
        raise ValueError(f"detail must be a JSON object, found {type(value).__name__}")
    if not isinstance(value.get("meta", {}), dict):
        raise ValueError(f"detail.meta must be a JSON object, found {type(value['meta']).__name__}")
    if not isinstance(value.get("by", ""), str):
        raise ValueError("detail.by must be text")
    return dict(value)

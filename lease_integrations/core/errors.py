"""One exception hierarchy, so callers can catch ``LeaseError`` and know they
have caught everything this library raises on purpose."""

from __future__ import annotations

import os
import socket
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from .redact import mask_url, redact
from .text import printable

if TYPE_CHECKING:
    from .record import LeaseRecord


class LeaseError(Exception):
    """Base of every error raised by lease_integrations.

    Its message never carries a store password: every text argument goes
    through ``redact`` (drivers echo parts of the DSN in their own errors,
    and those texts end up in ours)."""

    def __init__(self, *args: object) -> None:
        super().__init__(*(redact(a) if isinstance(a, str) else a for a in args))

    def __reduce__(self) -> tuple[Any, ...]:
        # Airflow and Prefect pickle exceptions across processes. The default
        # rebuilds with cls(*args), i.e. our subclasses' __init__ called with the
        # finished message: restore the message and fields instead.
        return (_rebuild, (type(self), self.args, self.__dict__))


def _rebuild(cls: type[LeaseError], args: tuple[Any, ...], state: dict[str, Any]) -> LeaseError:
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error


class ConfigurationError(LeaseError, ValueError):
    """A bad key, ttl, URL or policy. Raised before any work starts, so a
    misconfigured job never runs and never touches a lease record."""


class StoreUnavailable(LeaseError, ConnectionError):
    """The lease store could not be reached or answered with an error.

    Strict by default: a job whose store is down does not run unprotected.
    The URL in the message has its password masked."""

    def __init__(self, message: str, *, url: str | None = None) -> None:
        url = mask_url(url) if url else url
        self.url = url
        super().__init__(f"{message} (store: {url})" if url else message)


class LeaseBusy(LeaseError):
    """The lease is held by someone else. Names the holder and when its lease
    expires, so a person reading a log knows whom to look for."""

    def __init__(self, key: str, record: LeaseRecord | None = None) -> None:
        self.key = key
        self.record = record
        self.holder: str | None = record.holder if record else None
        self.token: int | None = record.token if record else None
        self.expires_at: datetime | None = record.expires_at if record else None
        self.meta: dict[str, Any] = dict(record.meta) if record else {}
        super().__init__(self._message())

    def _message(self) -> str:
        if self.record is None or self.holder is None:
            return f"lease {self.key!r} is busy"
        when = _fmt_time(self.expires_at)
        about = describe_meta(self.meta)
        about = f" ({about})" if about else ""
        # The holder is named by whoever took the lease, like meta: escaped alike.
        ours = " (this process: another thread or task)" if self.meta.get("pid") == os.getpid() \
            and self.meta.get("host") == socket.gethostname() else ""
        return (
            f"lease {self.key!r} is held by {_printable(self.holder)}{ours}{about} with token "
            f"{self.token}, until {when} unless renewed"
        )


class SupersedeRefused(LeaseBusy):
    """A run asked to supersede the holder and may not: its ``supersede_if``
    guard refused (a backfill must not displace today's run), or the holder
    is the asking process itself. The holder is left alone."""

    def __init__(self, key: str, record: LeaseRecord | None, reason: str) -> None:
        self.reason = reason
        super().__init__(key, record)

    def _message(self) -> str:
        return f"{super()._message()}; not superseded: {_printable(self.reason)}"


class NotReentrant(LeaseBusy):
    """A block asked for a lease that an enclosing block of the same thread or
    task already holds. Leases are not re-entrant: waiting would wait for
    ever on itself, so this is raised at once, whatever ``wait`` says."""

    def _message(self) -> str:
        return (f"lease {self.key!r} is already held by an enclosing block of this thread or "
                f"task (holder {printable(str(self.holder))}, token {self.token}): leases are "
                "not re-entrant; use the outer lease")


class LeaseLost(LeaseError):
    """The lease stopped being ours while the protected code ran: a renewal was
    refused, the trust window closed, or an operator broke it. Whatever the
    protected code did after this point was not exclusive."""

    def __init__(self, key: str, token: int | None = None, reason: str = "") -> None:
        self.key = key
        self.token = token
        self.reason = reason
        tok = f" (token {token})" if token is not None else ""
        why = f": {reason}" if reason else ""
        super().__init__(f"lease {key!r}{tok} was lost{why}")


class CorruptRecord(LeaseError):
    """A stored lease record could not be parsed (say, a field overwritten by
    hand with the store's own client). Names the key and the field, so the
    operator knows what to repair; never a bare ``ValueError`` from a parser."""

    def __init__(self, key: str, field: str, detail: str = "") -> None:
        self.key = key
        self.field = field
        self.detail = detail
        why = f": {detail}" if detail else ""
        super().__init__(f"lease {key!r} has an unreadable record (field {field!r}){why}")


class StaleToken(LeaseError):
    """A fenced resource refused a write whose fencing token is older than one
    it has already accepted: a paused or cut-off former holder woke up late."""

    def __init__(self, resource: str, token: int, newest: int | None = None) -> None:
        self.resource = resource
        self.token = token
        self.newest = newest
        newer = f"; it has already accepted token {newest}" if newest is not None else ""
        super().__init__(f"stale fencing token {token} for resource {resource!r}{newer}")


def describe_meta(meta: dict[str, Any]) -> str:
    """Render the holder's meta the way a person wants to read it in a log."""
    order = ("dag_id", "task_id", "run_id", "try_number", "flow_name", "flow_run_id", "host", "pid")
    parts = [f"{k}={_printable(meta[k])}" for k in order if meta.get(k) not in (None, "")]
    return ", ".join(parts)


def _printable(value: object) -> str:
    """Meta and the holder name are whatever a holder stored: a newline or an
    escape code in them must not forge a log line or reach a terminal. The
    one rule for that is ``core.text.printable`` (leasectl and the UI use it too)."""
    return printable(value)


def _fmt_time(value: datetime | None) -> str:
    if value is None:
        return "an unknown time"
    return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


class ConditionIgnored(ConfigurationError):
    """An object store accepted a conditional write's header and ignored it
    (found by ``core.fencing.probe``): a second ``If-None-Match: *`` or a stale
    ``If-Match`` overwrote the object. Neither a lease nor a fenced output can
    be trusted to it, so it is refused before either is written."""

    def __init__(self, store: str, conditions: tuple[str, ...]) -> None:
        self.store = store
        self.conditions = conditions
        super().__init__(
            f"object store {store} ignores the condition{'s' if len(conditions) > 1 else ''} "
            f"{', '.join(conditions)}: it overwrote an object the condition protected, so it "
            "cannot fence writes or keep leases (leasectl probe --url ... checks a store)")

"""How leases and events look on a terminal and in JSON.

Durations are computed on the store's clock (``observed_at``), never the
reader's: the operator's laptop may be minutes off from the store, and only
the store decides when a lease expires.

Every field comes from whoever wrote the record (holder names, meta, the
breaker's ``--by``), so nothing reaches the terminal unescaped: ``emit``
escapes control, format and other invisible characters (by Unicode
category, see ``core.text``) in each line it prints (a newline in meta cannot
forge a table row, an ESC sequence cannot recolour or rewrite the screen),
and ``dumps`` prints strict JSON (no bare ``NaN``).
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from typing import Any

from ..core.record import LeaseRecord
from ..core.store import TOOK_OVER, LeaseEvent
from ..core.text import printable

#: The random suffix of a holder id (see ``new_holder_id``): dropped in the
#: compact timeline, where ``host:pid`` is what a person recognises.
_HOLDER_SUFFIX = re.compile(r":[0-9a-f]{16}$")


def escape(text: object) -> str:
    """``text`` with every control, format, surrogate or otherwise invisible
    character shown as an escape (``\\n``, ``\\x1b``, ``\\u202e``): what was
    stored, made visible and inert. The core's one rule (``printable``)."""
    return printable(text)


def emit(line: object = "") -> None:
    """Print one line of console output, escaped: the only way the console
    writes to stdout, so no field can add a line or reach the terminal raw."""
    print(escape(line), file=sys.stdout)


def iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def clock(value: datetime | None) -> str:
    """A UTC timestamp a person can read: ``2026-11-29 23:40:01.123Z``."""
    if value is None:
        return "-"
    return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def span(seconds: float | None) -> str:
    """``4.2s``, ``3m07s``, ``2h05m``, ``3d04h``: short enough for a table cell."""
    if seconds is None:
        return "-"
    sign = "-" if seconds < 0 else ""
    s = abs(seconds)
    if s < 60:
        return f"{sign}{s:.1f}s"
    whole = int(s)
    if whole < 3600:
        return f"{sign}{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{sign}{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{sign}{whole // 86400}d{whole % 86400 // 3600:02d}h"


def held_for(record: LeaseRecord) -> float | None:
    if record.holder is None or record.acquired_at is None:
        return None
    return (record.observed_at - record.acquired_at).total_seconds()


def expires_text(record: LeaseRecord) -> str:
    left = record.expires_in
    if left is None:
        return "-"
    return span(left) if left > 0 else f"expired {span(-left)} ago"


def expires_phrase(record: LeaseRecord) -> str:
    """``expires in 4.2s`` or ``expired 1.3s ago``, for sentences."""
    text = expires_text(record)
    return text if text.startswith("expired") or text == "-" else f"expires in {text}"


def short_holder(holder: str | None) -> str:
    return "-" if holder is None else _HOLDER_SUFFIX.sub("", holder)


def meta_summary(meta: dict[str, Any]) -> str:
    """The holder's job in a few words: dag/task/run/try for Airflow, flow and
    flow run for Prefect, else the host and pid."""
    names: Sequence[tuple[str, str]]
    if meta.get("dag_id"):
        names = (("dag", "dag_id"), ("task", "task_id"), ("run", "run_id"), ("try", "try_number"))
    elif meta.get("flow_run_id") or meta.get("flow_name"):
        names = (("flow", "flow_name"), ("flow_run", "flow_run_id"))
    else:
        names = (("host", "host"), ("pid", "pid"))
    return " ".join(f"{label}={meta[k]}" for label, k in names if meta.get(k) not in (None, ""))


def table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """Left-aligned columns, two spaces apart; the last column is not padded.
    Cells are escaped first, so widths count what is printed and a newline
    inside a cell stays inside its row."""
    rows = [[escape(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]
    lines = []
    for cells in [list(headers), *rows]:
        padded = [c.ljust(w) for c, w in zip(cells[:-1], widths[:-1], strict=True)] + [cells[-1]]
        lines.append("  ".join(padded).rstrip())
    return "\n".join(lines)


def record_row(record: LeaseRecord) -> list[str]:
    return [record.key, record.state, record.holder or "-", str(record.token),
            span(held_for(record)), expires_text(record),
            meta_summary(record.meta) if record.holder else "-"]


RECORD_HEADERS = ("KEY", "STATE", "HOLDER", "TOKEN", "HELD FOR", "EXPIRES IN", "META")


def record_json(record: LeaseRecord) -> dict[str, Any]:
    return {
        "key": record.key,
        "state": record.state,
        "holder": record.holder,
        "token": record.token,
        "acquired_at": iso(record.acquired_at),
        "renewed_at": iso(record.renewed_at),
        "expires_at": iso(record.expires_at),
        "observed_at": iso(record.observed_at),
        "held_for_s": held_for(record),
        "expires_in_s": record.expires_in,
        "meta": record.meta,
    }


def took_over(event: LeaseEvent) -> tuple[int | None, str | None] | None:
    """For an ``acquired`` event that took over a lease which expired while
    held (its holder never released it): that lease's token and holder."""
    taken = event.detail.get(TOOK_OVER) if event.kind == "acquired" else None
    if not isinstance(taken, dict):
        return None
    token, holder = taken.get("token"), taken.get("holder")
    return (token if isinstance(token, int) else None,
            holder if isinstance(holder, str) else None)


def took_over_text(event: LeaseEvent) -> str:
    """``took over #7 of vm:812 (expired, never released)``, or ''."""
    taken = took_over(event)
    if taken is None:
        return ""
    token, holder = taken
    return (f"took over #{token if token is not None else '?'} of {holder or '?'} "
            "(expired, never released)")


def event_detail(event: LeaseEvent) -> str:
    detail = event.detail
    if event.kind == "acquired":
        parts = [took_over_text(event), meta_summary(detail.get("meta") or {})]
        return "; ".join(p for p in parts if p)
    if event.kind == "broken":
        return f"by={detail.get('by', '?')}"
    if event.kind == "lost":
        return str(detail.get("reason", ""))
    # A release carries its grant's meta only to say whose it is (the grant's
    # line shows it already).
    return " ".join(f"{k}={v}" for k, v in sorted(detail.items()) if k != "meta")


def event_json(event: LeaseEvent) -> dict[str, Any]:
    return {"key": event.key, "kind": event.kind, "token": event.token,
            "holder": event.holder, "at": iso(event.at), "detail": event.detail}


def dumps(value: Any) -> str:
    """Strict JSON (RFC 8259): a NaN or infinity stored by an older version is
    printed as the string ``"NaN"`` / ``"Infinity"`` / ``"-Infinity"``, never
    as a bare token that JSON parsers reject. Control characters come out as
    ``\\uXXXX`` escapes (``ensure_ascii``)."""
    try:
        return json.dumps(value, indent=2, sort_keys=False, default=str, allow_nan=False)
    except ValueError:
        return json.dumps(finite_json(value), indent=2, sort_keys=False, default=str,
                          allow_nan=False)


def finite_json(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(v) for v in value]
    return value


def emit_json(value: Any) -> None:
    """Print ``value`` as strict JSON (its own escaping keeps it inert)."""
    print(dumps(value), file=sys.stdout)


def print_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> None:
    for line in table(headers, rows).split("\n"):
        emit(line)


def unreadable_row(error: Any, width: int) -> list[str]:
    """A table row for a key whose record the store could not parse (a
    ``CorruptRecord`` from ``list()``'s ``unreadable``): the key and the field,
    so the operator sees it beside the readable ones and knows what to repair."""
    field = getattr(error, "field", None)
    detail = f"unreadable field {field!r}" if field else f"unreadable: {error}"
    return [str(getattr(error, "key", "?")), "UNREADABLE", *(["-"] * (width - 3)), detail]


def unreadable_json(error: Any) -> dict[str, Any]:
    return {"key": getattr(error, "key", None), "state": "unreadable",
            "field": getattr(error, "field", None), "error": str(error)}

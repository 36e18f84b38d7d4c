"""Check a recorded lease history against the safety rules, on your own system.

Why this exists: the library promises that a token is never granted twice,
that a fenced resource never accepts a stale write, and that two holders never
trust the same lease at once. A promise is only worth what you can check, so
this module judges what *your* store and *your* resource recorded, with the
same code the project's own race and fault tests use on every run.

Input:

- ``events``: the key's history as the store recorded it (``store.history(key,
  HISTORY_LIMIT)``: ``LeaseEvent``s, oldest first, on the store's clock);
- ``writes``: your fenced writes, in the order the resource decided them, as
  ``FencedWrite(token, accepted, at)`` (``at`` optional);
- ``holds`` (optional): the intervals in which holders trusted their lease,
  from their own logs (``Hold(token, start, end)``, all on one clock);
- ``ttl``: the shortest ttl the key was acquired with (optional);
- ``drift``: how far, in seconds, the clocks whose readings are compared may
  disagree (the store's clock with itself across a failover, the store's with
  the one that stamped ``writes[].at``, the holders' clock with itself).

What can be judged, and what cannot:

- **Tokens unique and rising** (``token-order``): judged from the ``acquired``
  events. A history is trimmed to the newest events per key, so only the
  grants it still holds are judged; a token granted before the oldest kept
  event and granted again later is still caught if the first grant is kept.
- **Events ordered** (``event-order``): event times never go back by more
  than ``drift``.
- **The store keeps exclusion** (``early-grant``, ``stale-release``): a grant
  while the previous token was neither released nor broken and could not yet
  have expired (less than ``ttl`` after it was granted: renewals only push
  expiry later) is a violation, and so is a release or break of a token after
  a newer token was granted (the store must refuse it). Needs ``ttl`` for the
  first. A refused acquire, renew or release is not recorded in any history,
  so "grant only if free" can be judged, "refuse only if held" cannot.
- **No accepted stale write** (``stale-write``): an accepted write whose token
  is older than one the resource already accepted; and (``unknown-token``) an
  accepted write whose token was never granted, when the history covers it.
- **No overlapping trust** (``late-write``, ``overlap``): renewals are not
  recorded, so when a holder *stopped* trusting its lease cannot be read from
  the store's history. What can be judged: an accepted write of token n
  stamped (``at``) more than ``drift`` after token m > n was granted is work of
  holder n after another holder's grant; with ``holds``, two holders' trust
  intervals overlapping by more than ``drift``. After an operator's break
  (a ``broken`` event) such an overlap is expected — the break takes the lease
  away at once and its holder stops at its next renewal, so only the fence
  protects that window — and is listed in ``notes``, not as a violation.
- **Not judged**: whether a holder kept to its trust window (its renewals and
  clock rate are not recorded), refused attempts, and anything before the
  oldest event the store kept. ``notes`` says when the history looks trimmed.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from .store import LeaseEvent

__all__ = ["FencedWrite", "HistoryReport", "Hold", "Violation", "check_history"]

#: A time: a timezone-aware ``datetime`` or seconds (POSIX, or any one clock).
Time = datetime | float


@dataclass(frozen=True)
class FencedWrite:
    """One write your fenced resource decided: ``accepted`` False when the
    fence refused it (``StaleToken``). ``at``: when it was decided, on a clock
    within ``drift`` of the store's (e.g. the database's ``now()``), or None."""

    token: int
    accepted: bool
    at: Time | None = None


@dataclass(frozen=True)
class Hold:
    """An interval in which a holder trusted its lease of ``token``, from its
    own log (e.g. ``time.monotonic()`` on one host at acquire and at release
    or loss). All holds given to one check must share a clock."""

    token: int
    start: Time
    end: Time
    holder: str | None = None


@dataclass(frozen=True)
class Violation:
    """One broken rule: ``rule`` is a short name (see the module docs),
    ``message`` says what happened with tokens, holders and times, and
    ``tokens`` names the tokens involved (the older first)."""

    rule: str
    message: str
    tokens: tuple[int, ...] = ()

    def __str__(self) -> str:
        return f"[{self.rule}] {self.message}"


@dataclass
class HistoryReport:
    """The verdict: ``ok`` when no rule was broken. ``violations`` in the order
    found (the first one is usually the cause of the rest); ``notes`` name what
    was explained (overlaps after a break) or could not be judged."""

    key: str | None = None
    grants: int = 0
    writes_accepted: int = 0
    writes_refused: int = 0
    violations: list[Violation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def first(self) -> Violation | None:
        return self.violations[0] if self.violations else None

    def rule(self, name: str) -> list[Violation]:
        """The violations of one rule."""
        return [v for v in self.violations if v.rule == name]

    def __str__(self) -> str:
        head = f"history of {self.key!r}" if self.key is not None else "history"
        lines = [f"{head}: {self.grants} grant(s), {self.writes_accepted} write(s) accepted, "
                 f"{self.writes_refused} refused by the fence: "
                 + ("OK" if self.ok else f"{len(self.violations)} VIOLATION(S)")]
        if self.violations:
            lines.append(f"first violation: {self.violations[0]}")
            lines += [f"  {v}" for v in self.violations[1:]]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def _seconds(t: Time) -> float:
    return t.timestamp() if isinstance(t, datetime) else float(t)


def _fmt(t: Time) -> str:
    return t.isoformat(timespec="milliseconds") if isinstance(t, datetime) else f"{t:.3f}"


def check_history(
    events: Iterable[LeaseEvent] = (),
    writes: Iterable[FencedWrite] = (),
    *,
    holds: Iterable[Hold] = (),
    ttl: float | None = None,
    drift: float = 0.0,
    key: str | None = None,
    history_limit: int | None = None,
) -> HistoryReport:
    """Judge one key's recorded history; see the module docs for the rules
    and for what a history can and cannot show. ``history_limit``: the most
    events the store keeps per key (``HISTORY_LIMIT``), to note a trimmed one."""
    if drift < 0:
        raise ValueError(f"drift must be >= 0 seconds, got {drift}")
    evs: Sequence[LeaseEvent] = list(events)
    if key is None and evs:
        key = evs[0].key
    report = HistoryReport(key=key)
    _check_events(evs, report, ttl, drift, history_limit)
    grants = {e.token: e for e in evs if e.kind == "acquired"}
    broken = {e.token for e in evs if e.kind == "broken" and e.holder is not None}
    _check_writes(list(writes), grants, broken, report, drift)
    _check_holds(list(holds), broken, report, drift)
    return report


def _check_events(evs: Sequence[LeaseEvent], report: HistoryReport, ttl: float | None,
                  drift: float, history_limit: int | None) -> None:
    if evs and (evs[0].kind != "acquired" or (history_limit and len(evs) >= history_limit)):
        report.notes.append(f"the history may be trimmed (it starts with a {evs[0].kind!r} event "
                            f"of token {evs[0].token}): nothing before it is judged")
    if ttl is None and any(e.kind == "acquired" for e in evs):
        report.notes.append("no ttl given: a grant before the previous lease could have expired "
                            "is not judged")
    for a, b in itertools.pairwise(evs):
        if _seconds(b.at) < _seconds(a.at) - drift:
            report.violations.append(Violation(
                "event-order", f"{b.kind} of token {b.token} at {_fmt(b.at)} is recorded after "
                f"{a.kind} of token {a.token} at {_fmt(a.at)}: the history goes back in time",
                (a.token, b.token)))

    granted_to: dict[int, str | None] = {}
    current: LeaseEvent | None = None  # the newest grant
    ended = True  # the newest grant was released or broken
    for e in evs:
        if e.kind == "acquired":
            report.grants += 1
            if e.token in granted_to:
                report.violations.append(Violation(
                    "token-order", f"token {e.token} granted twice: to {granted_to[e.token]} and "
                    f"to {e.holder} at {_fmt(e.at)}", (e.token,)))
            elif current is not None and e.token <= current.token:
                report.violations.append(Violation(
                    "token-order", f"token {e.token} granted to {e.holder} at {_fmt(e.at)} after "
                    f"token {current.token} (tokens must rise)", (current.token, e.token)))
            if current is not None and not ended and ttl is not None:
                earliest = _seconds(current.at) + ttl
                if _seconds(e.at) < earliest - drift:
                    report.violations.append(Violation(
                        "early-grant", f"token {e.token} granted to {e.holder} at {_fmt(e.at)}, "
                        f"{earliest - _seconds(e.at):.3f} s before token {current.token} "
                        f"({current.holder}, granted at {_fmt(current.at)} with ttl {ttl:g} s) "
                        "could have expired, and it was neither released nor broken",
                        (current.token, e.token)))
            granted_to.setdefault(e.token, e.holder)
            current, ended = e, False
        elif e.kind in ("released", "broken"):
            if e.kind == "broken" and e.holder is None:
                continue  # a break of an already released record changes nothing
            if current is not None and e.token < current.token:
                report.violations.append(Violation(
                    "stale-release", f"{e.kind} of token {e.token} ({e.holder}) at {_fmt(e.at)}, "
                    f"after token {current.token} was granted to {current.holder} at "
                    f"{_fmt(current.at)}: the store let go of a lease that was no longer current",
                    (e.token, current.token)))
            elif current is not None and e.token == current.token:
                if ended:
                    report.violations.append(Violation(
                        "stale-release", f"{e.kind} of token {e.token} at {_fmt(e.at)}, but it "
                        "was already released or broken", (e.token,)))
                ended = True
            elif current is not None and e.token > current.token:
                report.violations.append(Violation(
                    "unknown-token", f"{e.kind} of token {e.token} at {_fmt(e.at)}, which was "
                    f"never granted (the newest grant is token {current.token})", (e.token,)))


def _check_writes(writes: list[FencedWrite], grants: dict[int, LeaseEvent], broken: set[int],
                  report: HistoryReport, drift: float) -> None:
    newest_grant = max(grants, default=None)
    oldest_grant = min(grants, default=None)
    highest: FencedWrite | None = None
    for w in writes:
        if not w.accepted:
            report.writes_refused += 1
            continue
        report.writes_accepted += 1
        if highest is not None and w.token < highest.token:
            report.violations.append(Violation(
                "stale-write", f"the resource accepted a write with token {w.token}"
                + (f" at {_fmt(w.at)}" if w.at is not None else "")
                + f" after one with token {highest.token}: the fence let a stale holder through",
                (w.token, highest.token)))
        if newest_grant is not None and oldest_grant is not None \
                and oldest_grant <= w.token and w.token not in grants:
            report.violations.append(Violation(
                "unknown-token", f"the resource accepted a write with token {w.token}, which the "
                "history never granted", (w.token,)))
        if w.at is not None:
            newer = [g for t, g in grants.items() if t > w.token
                     and _seconds(g.at) + drift < _seconds(w.at)]
            if newer:
                first = min(newer, key=lambda g: g.token)
                text = (f"token {w.token} wrote at {_fmt(w.at)}, "
                        f"{_seconds(w.at) - _seconds(first.at):.3f} s after token {first.token} "
                        f"was granted to {first.holder} at {_fmt(first.at)}")
                if w.token in broken:
                    report.notes.append(f"{text}; token {w.token} had been broken by an operator "
                                        "(expected: only the fence protects that window)")
                else:
                    report.violations.append(Violation("late-write", text, (w.token, first.token)))
        if highest is None or w.token > highest.token:
            highest = w


def _check_holds(holds: list[Hold], broken: set[int], report: HistoryReport, drift: float) -> None:
    ordered = sorted(holds, key=lambda h: _seconds(h.start))
    for a, b in itertools.pairwise(ordered):
        if b.token <= a.token:
            report.violations.append(Violation(
                "token-order", f"{b.holder or 'a holder'} began trusting token {b.token} at "
                f"{_fmt(b.start)}, after {a.holder or 'a holder'} began trusting token {a.token} "
                f"at {_fmt(a.start)} (tokens must rise)", (a.token, b.token)))
    for i, a in enumerate(ordered):
        for b in ordered[i + 1:]:
            if _seconds(b.start) >= _seconds(a.end) - drift:
                if _seconds(b.start) >= _seconds(a.end):
                    break  # sorted by start: later ones start later still (ends may vary)
                continue
            overlap = _seconds(a.end) - _seconds(b.start)
            text = (f"{a.holder or 'a holder'} trusted token {a.token} until {_fmt(a.end)}, "
                    f"{overlap:.3f} s into {b.holder or 'a holder'}'s token {b.token} "
                    f"(from {_fmt(b.start)})")
            if a.token in broken:
                report.notes.append(f"{text}; token {a.token} had been broken by an operator")
            else:
                report.violations.append(Violation("overlap", text, (a.token, b.token)))

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
  ``FencedWrite(token, accepted, at, sent)`` (``at``: when the resource
  decided it; ``sent``: when the holder sent it; both optional);
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
- **Writes in their grant** (``early-write``): an accepted write of token n
  stamped (``at`` or ``sent``) more than ``drift`` before token n was granted.
- **Takeovers** (``took-over``): a grant whose ``took_over`` names a token
  that was not the newest grant, or one already released or broken.
- **No overlapping trust** (``late-write``, ``overlap``): renewals are not
  recorded, so when a holder *stopped* trusting its lease cannot be read from
  the store's history. What can be judged: an accepted write of token n
  *sent* more than ``drift`` after token m > n was granted is work of holder n
  after another holder's grant; with ``holds``, two grants' trust intervals
  overlapping by more than ``drift`` (holds of one token are one grant: the
  DAG-run lease's keeper and its tasks adopt one lease, at once or one after
  another). After an operator's break (a ``broken`` event) such an overlap is
  expected — the break takes the lease away at once and its holder stops at
  its next renewal, so only the fence protects that window — and is listed in
  ``notes``, not as a violation.
- **Hazards, not violations** (``in-flight-write``): an accepted write of
  token n *decided* (``at``) after token m > n was granted, before any write
  of a newer token was accepted, with no ``sent`` after that grant. The
  protocol permits it (proof/lease.pml models writes in flight: the old
  holder stopped before the grant, its write landed after) and the fence
  refuses such a write only once the new holder has written; a side effect
  outside the fence is not protected in that window. Listed in ``hazards``.
- **Not judged**: whether a holder kept to its trust window (its renewals and
  clock rate are not recorded), refused attempts, and anything before the
  oldest event the store kept. ``notes`` says when the history looks trimmed.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from .store import TOOK_OVER, LeaseEvent

__all__ = ["FencedWrite", "HistoryReport", "Hold", "Violation", "check_history"]

#: A time: a timezone-aware ``datetime`` or seconds (POSIX, or any one clock).
Time = datetime | float


@dataclass(frozen=True)
class FencedWrite:
    """One write your fenced resource decided: ``accepted`` False when the
    fence refused it (``StaleToken``). ``at``: when it was decided, on a clock
    within ``drift`` of the store's (e.g. the database's ``now()``), or None;
    ``sent``: when the holder sent it, on such a clock, or None. A write can
    land long after it was sent: only ``sent`` shows when its holder acted."""

    token: int
    accepted: bool
    at: Time | None = None
    sent: Time | None = None


@dataclass(frozen=True)
class Hold:
    """An interval in which a holder trusted its lease of ``token``, from its
    own log (e.g. ``time.monotonic()`` on one host at acquire and at release
    or loss). All holds given to one check must share a clock. ``adopted``:
    the holder was handed the lease (``hold_adopted``: a DAG-run lease's
    tasks), not granted it; its hold is part of that token's one grant."""

    token: int
    start: Time
    end: Time
    holder: str | None = None
    adopted: bool = False


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
    was explained (overlaps after a break) or could not be judged;
    ``hazards`` what the protocol permits but an unfenced side effect would
    not survive (``in-flight-write``): they do not make the report fail."""

    key: str | None = None
    grants: int = 0
    writes_accepted: int = 0
    writes_refused: int = 0
    violations: list[Violation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    hazards: list[Violation] = field(default_factory=list)

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
        lines += [f"hazard: {h}" for h in self.hazards]
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
    grants: dict[int, LeaseEvent] = {}
    for e in evs:
        if e.kind == "acquired":
            grants.setdefault(e.token, e)  # a token's first grant
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
            took = e.detail.get(TOOK_OVER) if isinstance(e.detail, dict) else None
            if isinstance(took, dict) and current is not None \
                    and (took.get("token") != current.token or ended):
                report.violations.append(Violation(
                    "took-over", f"token {e.token} granted to {e.holder} at {_fmt(e.at)} took "
                    f"over token {took.get('token')}, but the newest grant was token "
                    f"{current.token}" + (", already released or broken" if ended
                                          and took.get("token") == current.token else ""),
                    (current.token, e.token)))
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
        own = grants.get(w.token)
        stamped = [t for t in (w.sent, w.at) if t is not None]
        if own is not None and stamped and _seconds(min(stamped, key=_seconds)) \
                < _seconds(own.at) - drift:
            first_stamp = min(stamped, key=_seconds)
            report.violations.append(Violation(
                "early-write", f"the resource accepted a write with token {w.token} stamped "
                f"{_fmt(first_stamp)}, {_seconds(own.at) - _seconds(first_stamp):.3f} s before "
                f"token {w.token} was granted to {own.holder} at {_fmt(own.at)}", (w.token,)))
        for stamp, rule in ((w.sent, "late-write"), (w.at, "in-flight-write")):
            first = _first_newer_grant(grants, w.token, stamp, drift)
            if first is None:
                continue
            text = (f"token {w.token}'s write {'sent' if rule == 'late-write' else 'decided'} at "
                    f"{_fmt(stamp)}, {_seconds(stamp) - _seconds(first.at):.3f} s "  # type: ignore[arg-type]
                    f"after token {first.token} was granted to {first.holder} at {_fmt(first.at)}")
            if w.token in broken:
                report.notes.append(f"{text}; token {w.token} had been broken by an operator "
                                    "(expected: only the fence protects that window)")
            elif rule == "late-write":
                report.violations.append(Violation(rule, text, (w.token, first.token)))
            else:
                report.hazards.append(Violation(
                    rule, f"{text}, before any write of a newer token: a write in flight when "
                    "the next grant came, which the protocol permits and the fence refuses only "
                    "once the new holder writes (give 'sent' to judge when it was sent)",
                    (w.token, first.token)))
            break
        if highest is None or w.token > highest.token:
            highest = w


def _first_newer_grant(grants: dict[int, LeaseEvent], token: int, stamp: Time | None,
                       drift: float) -> LeaseEvent | None:
    """The oldest grant of a token above ``token`` made more than ``drift``
    before ``stamp``, or None."""
    if stamp is None:
        return None
    newer = [g for t, g in grants.items() if t > token and _seconds(g.at) + drift < _seconds(stamp)]
    return min(newer, key=lambda g: g.token, default=None)


def _check_holds(holds: list[Hold], broken: set[int], report: HistoryReport, drift: float) -> None:
    ordered = sorted(holds, key=lambda h: _seconds(h.start))
    granted: dict[int, Hold] = {}
    for h in ordered:
        first = granted.setdefault(h.token, h) if not h.adopted else h
        if first is not h:
            report.violations.append(Violation(
                "token-order", f"token {h.token} granted twice: {first.holder or 'a holder'} "
                f"began trusting it at {_fmt(first.start)} and {h.holder or 'a holder'} at "
                f"{_fmt(h.start)}, neither adopting it", (h.token,)))
    for a, b in itertools.pairwise(ordered):
        if b.token < a.token:
            report.violations.append(Violation(
                "token-order", f"{b.holder or 'a holder'} began trusting token {b.token} at "
                f"{_fmt(b.start)}, after {a.holder or 'a holder'} began trusting token {a.token} "
                f"at {_fmt(a.start)} (tokens must rise)", (a.token, b.token)))
    for i, a in enumerate(ordered):
        for b in ordered[i + 1:]:
            if b.token == a.token and (a.adopted or b.adopted):
                continue  # adopters of one grant (the DAG-run lease): one grant, one trust
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

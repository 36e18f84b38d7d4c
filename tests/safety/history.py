"""Event histories of fault-injection runs, and the checker that judges them.

Workers append one JSON line per event to their own file (flushed at once, so
a SIGKILLed worker loses nothing it wrote); the harness appends the faults it
injected. Times are CLOCK_MONOTONIC nanoseconds: one clock for every process
on a Linux host, so events of different workers can be ordered.

Rules checked per key (issue 5):
  1. tokens are unique and strictly increasing in grant order;
  2. no two holders' leases overlap in time, unless the earlier holder was
     paused or cut off (then it is named as the stale holder);
  3. the fenced resource never accepted a token older than one it had
     already accepted;
  4. the token counter read from the store never goes backwards, and ends at
     the newest token granted (no record lost or corrupted);
  5. no token is granted twice, whatever happened between the two grants
     (failover to a lagging replica, eviction, FLUSHALL, a deleted row): the
     issue-13 rule, checked over the whole run, not just neighbours.

Rules 1, 2 (finding the overlaps) and 3 are judged by the public checker,
``lease_integrations.core.checker``, the module users run on their own
histories, so it is exercised on every run; what stays here is what only this
harness knows: the injected pauses that explain an overlap, the store's
counter samples, and the workers' own reports of their writes. The store's
own history of the key is judged by the public checker too (``store_report``).
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lease_integrations.core.checker import FencedWrite, HistoryReport, Hold, check_history


class EventLog:
    """Append-only JSONL log, safe to write from the heartbeat thread too."""

    def __init__(self, path: Path | str, **fields: Any) -> None:
        self._file = open(path, "a", buffering=1)  # noqa: SIM115 - lives as long as the worker
        self._lock = threading.Lock()
        self._fields = fields

    def write(self, event: str, **data: Any) -> None:
        line = json.dumps({"ev": event, "t": time.monotonic_ns(), **self._fields, **data})
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()


def read_events(paths: Iterable[Path]) -> list[dict[str, Any]]:
    events = []
    for path in paths:
        if path.exists():
            for line in path.read_text().splitlines():
                if line.strip():
                    events.append(json.loads(line))
    return sorted(events, key=lambda e: e["t"])


@dataclass
class Grant:
    token: int
    worker: str
    pid: int
    start: int
    end: int | None = None
    how_it_ended: str = "open"
    lost_at: int | None = None
    #: the end of the trust window the lease came with (monotonic ns)
    trusted_until: int | None = None

    @property
    def never_trusted(self) -> bool:
        """Paused after ``acquire()`` checked the window and before it
        returned, past the window: the holder never trusted this lease (its
        ``check()`` raised from the start), so it is no hold."""
        return self.trusted_until is not None and self.start >= self.trusted_until


@dataclass
class Verdict:
    grants: list[Grant] = field(default_factory=list)
    rule1: list[str] = field(default_factory=list)
    overlaps_explained: list[str] = field(default_factory=list)
    rule2: list[str] = field(default_factory=list)
    rule3: list[str] = field(default_factory=list)
    rule4: list[str] = field(default_factory=list)
    rule5: list[str] = field(default_factory=list)
    writes_accepted: int = 0
    stale_writes_rejected: int = 0
    #: the public checker's verdict on the holders' log and the resource
    report: HistoryReport | None = None
    #: its verdict on the store's own history of the key (see Scenario.verdict)
    store_report: HistoryReport | None = None

    @property
    def violations(self) -> list[str]:
        store = [f"store history: {v}" for v in self.store_report.violations] if self.store_report else []
        return self.rule1 + self.rule2 + self.rule3 + self.rule4 + self.rule5 + store

    def summary(self) -> str:
        never = sum(1 for g in self.grants if g.never_trusted)
        return (f"{len(self.grants)} grants ({never} returned past their trust window), "
                f"{len(self.overlaps_explained)} overlaps (all explained: "
                f"{not self.rule2}), {self.stale_writes_rejected} stale writes rejected, "
                f"{len(self.violations)} violations")


def _grants(events: list[dict[str, Any]], end_of_run: int) -> list[Grant]:
    open_by_pid: dict[int, Grant] = {}
    grants: list[Grant] = []
    for e in events:
        ev, pid = e["ev"], e.get("pid")
        if ev == "acquire":
            # ``since``: when acquire() returned, before the log line was written.
            grant = Grant(e["token"], e["worker"], pid, e.get("since", e["t"]),
                          trusted_until=e.get("trusted_until"))
            grants.append(grant)
            open_by_pid[pid] = grant
        elif ev in ("release", "gave_up") and pid in open_by_pid:
            grant = open_by_pid.pop(pid)
            grant.end, grant.how_it_ended = e["t"], ev
        elif ev == "lost" and pid in open_by_pid:
            open_by_pid[pid].lost_at = e["t"]
        elif ev == "killed" and e["target"] in open_by_pid:
            grant = open_by_pid.pop(e["target"])
            grant.end, grant.how_it_ended = e["t"], "killed"
    for grant in open_by_pid.values():
        grant.end = end_of_run
    return grants


def _pauses(events: list[dict[str, Any]]) -> dict[int, list[tuple[int, int]]]:
    """Injected pauses and cut-offs per victim pid: (from, to)."""
    spans: dict[int, list[tuple[int, int]]] = {}
    for e in events:
        if e["ev"] in ("paused", "cut_off"):
            spans.setdefault(e["target"], []).append((e["from"], e["to"]))
    return spans


def tokens_granted_twice(grants: Iterable[tuple[int, str]]) -> list[str]:
    """Rule 5 on its own: every token granted more than once, naming both
    grantees. ``grants`` are (token, who) pairs in any order."""
    first: dict[int, str] = {}
    found: list[str] = []
    for token, who in grants:
        if token in first:
            found.append(f"token {token} granted twice: to {first[token]} and to {who}")
        else:
            first[token] = who
    return found


def check(events: list[dict[str, Any]], accepted_tokens: list[int],
          counter_samples: list[int], final_token: int | None) -> Verdict:
    """Judge one run. ``accepted_tokens`` is the fenced resource's log, in
    the order it accepted writes; ``counter_samples`` the store's token read
    over time (across restarts); ``final_token`` the record's token at the end."""
    end_of_run = max((e["t"] for e in events), default=0)
    verdict = Verdict(grants=_grants(events, end_of_run))
    grants = verdict.grants

    # The public checker: each grant is a hold (start to release, kill or the
    # loss the holder was told of), in monotonic ns on one host; the resource's
    # accepted tokens are its writes, in the order it accepted them.
    holds = [Hold(g.token, g.start, min(g.end or end_of_run, g.lost_at or end_of_run), g.worker)
             for g in grants if not g.never_trusted]
    report = verdict.report = check_history(
        holds=holds, writes=[FencedWrite(t, True) for t in accepted_tokens])
    by_token = {g.token: g for g in grants}

    # rule 1: unique, strictly increasing in grant order
    verdict.rule1 = [v.message for v in report.rule("token-order")]

    # rule 5: no token granted twice (anywhere in the run)
    verdict.rule5 = tokens_granted_twice((g.token, g.worker) for g in grants)

    # rule 2: overlaps must be explained by an injected pause or cut of the earlier holder
    pauses = _pauses(events)
    for v in report.rule("overlap"):
        a, b = by_token[v.tokens[0]], by_token[v.tokens[1]]
        spans = pauses.get(a.pid, [])
        paused = any(lo <= b.start and hi >= a.start for lo, hi in spans)
        if paused:
            verdict.overlaps_explained.append(
                f"{a.worker} (token {a.token}) was paused/cut while {b.worker} took token "
                f"{b.token}: {a.worker} is the stale holder"
                + (" and was told it lost the lease" if a.lost_at else ""))
        else:
            verdict.rule2.append(f"{a.worker} token {a.token} overlaps {b.worker} token {b.token}")

    # rule 3: the fenced resource never went back
    verdict.rule3 = [v.message for v in report.rule("stale-write")]
    verdict.writes_accepted = sum(1 for e in events if e["ev"] == "write" and e["ok"])
    verdict.stale_writes_rejected = sum(1 for e in events if e["ev"] == "write" and not e["ok"])
    for e in events:
        if e["ev"] == "write" and e["ok"] and accepted_tokens and e["token"] not in accepted_tokens:
            verdict.rule3.append(f"write with token {e['token']} reported accepted but not in the resource")

    # rule 4: the counter never went back, and nothing granted was forgotten
    for x, y in itertools.pairwise(counter_samples):
        if y < x:
            verdict.rule4.append(f"store token counter went back from {x} to {y}")
    newest = max((g.token for g in grants), default=0)
    if grants and (final_token is None or final_token < newest):
        verdict.rule4.append(f"store's record ends at token {final_token}, below granted {newest}")
    return verdict

"""Measuring helpers shared by every section: timed trials, medians of
interleaved runs, percentiles and the client-side count of Redis sends.

Why interleaved: the machine is shared (two cores, other jobs), so load
drifts over a run. Running contender A, B, C, A, B, C ... and taking each
one's median puts every contender under the same drift, which a ratio then
cancels; running all of A and then all of B would not.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

#: One contender: ``acquire()`` returns a handle that ``release(handle)`` gives
#: back (``release`` None for a floor such as PING, whose "cycle" is one call).
Acquire = Callable[[], Any]
Release = Callable[[Any], object] | None


@dataclass
class Contender:
    name: str
    acquire: Acquire
    release: Release = None
    floor: bool = False
    note: str = ""
    close: Callable[[], None] | None = None


@dataclass
class Trial:
    cycles_per_s: float  # 1 / median cycle time: what a cycle costs when not preempted
    throughput: float  # cycles / wall time: includes every preemption by other jobs
    acquire_us: float  # median acquire latency in this trial
    release_us: float
    cpu_us: float  # process CPU per cycle, every thread: less load-sensitive than wall time


@dataclass
class Result:
    name: str
    trials: list[Trial] = field(default_factory=list)
    sends_per_cycle: float | None = None
    sends_acquire: float | None = None
    server_cpu_us: float | None = None  # the server's CPU per cycle, where it reports it
    note: str = ""
    floor: bool = False

    @property
    def cycles_per_s(self) -> float:
        return statistics.median(t.cycles_per_s for t in self.trials)

    @property
    def acquire_us(self) -> float:
        return statistics.median(t.acquire_us for t in self.trials)

    @property
    def release_us(self) -> float:
        return statistics.median(t.release_us for t in self.trials)

    @property
    def cpu_us(self) -> float:
        return statistics.median(t.cpu_us for t in self.trials)

    @property
    def throughput(self) -> float:
        return statistics.median(t.throughput for t in self.trials)

    def paired_ratios(self, base: Result) -> list[float]:
        """Run i of this contender over run i of ``base``: both ran back to back
        in the same round, so the ratio cancels most of the load drift."""
        return [t.cycles_per_s / b.cycles_per_s for t, b in zip(self.trials, base.trials)]

    def ratio_to(self, base: Result) -> float:
        return statistics.median(self.paired_ratios(base))

    def ratio_range(self, base: Result) -> tuple[float, float]:
        ratios = self.paired_ratios(base)
        return min(ratios), max(ratios)

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "floor": self.floor, "note": self.note,
            "cycles_per_s": round(self.cycles_per_s, 1),
            "throughput_per_s": round(self.throughput, 1),
            "acquire_us_p50": round(self.acquire_us, 1),
            "release_us_p50": None if self.floor else round(self.release_us, 1),
            "client_cpu_us_per_cycle": round(self.cpu_us, 1),
            "sends_per_cycle": self.sends_per_cycle, "sends_acquire": self.sends_acquire,
            "server_cpu_us_per_cycle": self.server_cpu_us,
            "runs": [round(t.cycles_per_s, 1) for t in self.trials],
        }


def trial(c: Contender, seconds: float) -> Trial:
    """Run cycles for about ``seconds``; per-call latencies on perf_counter_ns.

    Cycles per second come from the median cycle time: on a shared machine a
    few cycles preempted by another job's process would otherwise decide the
    figure (the plain count over wall time is kept as ``throughput``)."""
    acq: list[int] = []
    rel: list[int] = []
    cyc: list[int] = []
    clock = time.perf_counter_ns
    acquire, release = c.acquire, c.release
    cpu0 = time.process_time()
    start = clock()
    end = start + int(seconds * 1e9)
    n = 0
    while True:
        t0 = clock()
        handle = acquire()
        t1 = clock()
        if release is not None:
            release(handle)
            t2 = clock()
            rel.append(t2 - t1)
        else:
            t2 = t1
        acq.append(t1 - t0)
        cyc.append(t2 - t0)
        n += 1
        if (n & 15) == 0 and clock() >= end:
            break
    elapsed = (clock() - start) / 1e9
    cpu = time.process_time() - cpu0
    return Trial(1e9 / statistics.median(cyc), n / elapsed, statistics.median(acq) / 1e3,
                 statistics.median(rel) / 1e3 if rel else 0.0, cpu / n * 1e6)


def warm_up(c: Contender, cycles: int = 200, seconds: float = 0.3) -> None:
    """Open connections, load scripts, let prepared statements kick in."""
    end = time.monotonic() + seconds
    for _ in range(cycles):
        if time.monotonic() > end:
            break
        handle = c.acquire()
        if c.release is not None:
            c.release(handle)


def interleaved(contenders: Sequence[Contender], runs: int, seconds: float,
                progress: Callable[[str], None] | None = None) -> list[Result]:
    """``runs`` rounds; each round runs every contender once, in a rotated
    order so no contender always runs right after the same neighbour."""
    results = [Result(c.name, note=c.note, floor=c.floor) for c in contenders]
    for c in contenders:
        warm_up(c)
    for r in range(runs):
        order = list(range(len(contenders)))
        order = order[r % len(order):] + order[:r % len(order)]
        for i in order:
            results[i].trials.append(trial(contenders[i], seconds))
        if progress:
            progress(f"run {r + 1}/{runs}")
    return results


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def median_or_nan(values: Sequence[float]) -> float:
    clean = [v for v in values if v == v]
    return statistics.median(clean) if clean else float("nan")


class SendCounter:
    """Counts what redis-py writes to its sockets: one ``send_packed_command``
    is one request on the wire (a pipeline or a script call is one), so sends
    per cycle are round trips per cycle as the client sees them. Redis's own
    command statistics would also count the commands a Lua script runs."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    @contextmanager
    def installed(self) -> Iterator[SendCounter]:
        import redis.connection as rc

        owner = getattr(rc, "AbstractConnection", rc.Connection)
        original = owner.send_packed_command
        counter = self

        def counting(conn: Any, command: Any, check_health: bool = True) -> None:
            with counter._lock:
                counter.count += 1
            original(conn, command, check_health)

        setattr(owner, "send_packed_command", counting)  # noqa: B010 - patching a class
        try:
            yield self
        finally:
            setattr(owner, "send_packed_command", original)  # noqa: B010


def count_sends(c: Contender, cycles: int = 200) -> tuple[float, float]:
    """Sends per whole cycle and per acquire, averaged over ``cycles``."""
    counter = SendCounter()
    acquire_sends = 0
    with counter.installed():
        for _ in range(cycles):
            before = counter.count
            handle = c.acquire()
            acquire_sends += counter.count - before
            if c.release is not None:
                c.release(handle)
        total = counter.count
    return round(total / cycles, 2), round(acquire_sends / cycles, 2)

"""Contended handover: N processes on one key, each holding it for a short
fixed time, measured on CLOCK_MONOTONIC (one clock for every process on a
Linux host).

The latency is from the moment a holder starts its release to the moment the
next holder's acquire returns. A process that just released waits until
someone else has taken the key before it competes again: otherwise it would
win its own release back at once (it is the only contender not asleep) and
the figure would measure a re-acquire, not a waiter's wake-up.
"""

from __future__ import annotations

import itertools
import multiprocessing as mp
import time
import uuid
from dataclasses import dataclass
from typing import Any

from .harness import median_or_nan, percentile

CLOCK = time.CLOCK_MONOTONIC
TTL = 10.0


def now() -> float:
    return time.clock_gettime(CLOCK)


@dataclass
class Spec:
    name: str
    kind: str  # "lease", "redis-py", "prl"
    url: str
    note: str = ""


def _locker(spec: Spec, key: str) -> tuple[Any, Any, Any]:
    """(acquire(wait) -> handle | None, release(handle), close)."""
    if spec.kind == "lease":
        from lease_integrations import LeaseBusy, LeaseLock, connect

        store = connect(spec.url)
        lock = LeaseLock(store, key, ttl=TTL)

        def acquire(wait: float) -> Any:
            try:
                return lock.acquire(wait=wait)
            except LeaseBusy:
                return None

        return acquire, lock.release, store.close
    import redis

    client = redis.Redis.from_url(spec.url)
    if spec.kind == "redis-py":
        rlock = client.lock(key, timeout=TTL)  # default sleep=0.1: polls every 100 ms

        def acquire_rp(wait: float) -> Any:
            return rlock if rlock.acquire(blocking=True, blocking_timeout=wait) else None

        return acquire_rp, lambda lk: lk.release(), client.close
    import redis_lock  # type: ignore[import-untyped]

    plock = redis_lock.Lock(client, key, expire=int(TTL))

    def acquire_prl(wait: float) -> Any:
        # python-redis-lock takes whole seconds; holds past the window are dropped.
        return plock if plock.acquire(blocking=True, timeout=max(1, int(wait))) else None

    return acquire_prl, lambda lk: lk.release(), client.close


#: A first, unrecorded round opens every worker's connections and listeners.
WARM_UP = 0.5


def worker(spec: Spec, key: str, durations: list[float], hold: float,
           barrier: Any, counter: Any, out: Any) -> None:
    acquire, release, close = _locker(spec, key)
    try:
        for r, seconds in enumerate(durations):
            barrier.wait()
            end = now() + seconds
            holds: list[tuple[float, float, float]] = []
            while True:
                t_wait = now()
                remaining = end - t_wait
                if remaining <= 0:
                    break
                handle = acquire(remaining)
                if handle is None:
                    break
                t_acq = now()
                with counter.get_lock():
                    counter.value += 1
                    mine = counter.value
                time.sleep(hold)
                t_rel = now()
                release(handle)
                holds.append((t_acq, t_rel, t_wait))
                while counter.value == mine and now() < end:  # let someone else in
                    time.sleep(0.0005)
            out.put((r, end - seconds, holds))
    finally:
        close()


@dataclass
class RoundStats:
    throughput: float
    p50_ms: float
    p99_ms: float
    handovers: int
    overlaps: int
    overtakes: int


def overtakes(holds: list[tuple[float, float, float]]) -> int:
    """Fairness: how many grants went to a waiter that started waiting after
    another one that was still waiting (and got the key only later). Holds
    are (acquired, released, started waiting), sorted by acquired."""
    count = 0
    for i, (_, _, wait) in enumerate(holds):
        if any(w < wait for _, _, w in holds[i + 1:]):
            count += 1
    return count


def analyse(per_process: list[tuple[float, list[tuple[float, float, float]]]],
            seconds: float) -> RoundStats:
    start = min(s for s, _ in per_process)
    end = start + seconds
    holds = sorted(h for _, hs in per_process for h in hs)
    holds = [h for h in holds if h[0] <= end]
    gaps = []
    overlaps = 0
    for (_, prev_rel, _), (next_acq, _, _) in itertools.pairwise(holds):
        if next_acq < prev_rel:
            overlaps += 1  # two holders at once: would be a broken lock
        gaps.append((next_acq - prev_rel) * 1e3)
    return RoundStats(len(holds) / seconds, percentile(gaps, 50), percentile(gaps, 99),
                      len(gaps), overlaps, overtakes(holds))


#: Imported once by the fork server, so each worker starts in milliseconds
#: rather than re-importing everything (seconds per process on a busy host).
PRELOAD = ["benchmarks.handover", "lease_integrations", "lease_integrations.stores.redis",
           "lease_integrations.stores.postgres", "lease_integrations.stores.sqlite", "redis",
           "redis_lock"]


def _context() -> Any:
    # forkserver: a clean single-threaded parent for the workers (this process
    # may already run heartbeat and listener threads, which fork would copy badly).
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def run_one(spec: Spec, processes: int, rounds: int, seconds: float, hold: float) -> dict[str, Any]:
    ctx = _context()
    barrier = ctx.Barrier(processes + 1)
    counter = ctx.Value("q", 0)
    out = ctx.Queue()
    key = f"bench-handover-{uuid.uuid4().hex[:8]}"
    durations = [WARM_UP] + [seconds] * rounds
    procs = [ctx.Process(target=worker, args=(spec, key, durations, hold, barrier, counter, out),
                         daemon=True) for _ in range(processes)]
    for p in procs:
        p.start()
    stats: list[RoundStats] = []
    try:
        for r, length in enumerate(durations):
            barrier.wait(timeout=120)
            got = [out.get(timeout=length + 60) for _ in procs]
            if r > 0:
                stats.append(analyse([(s, hs) for _, s, hs in got], length))
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    return {
        "name": spec.name, "note": spec.note, "processes": processes, "hold_ms": hold * 1e3,
        "throughput_per_s": round(median_or_nan([s.throughput for s in stats]), 1),
        "p50_ms": round(median_or_nan([s.p50_ms for s in stats]), 2),
        "p99_ms": round(median_or_nan([s.p99_ms for s in stats]), 2),
        "handovers": sum(s.handovers for s in stats),
        "overlaps": sum(s.overlaps for s in stats),
        "overtakes": sum(s.overtakes for s in stats),
        "runs": [{"throughput": round(s.throughput, 1), "p50_ms": round(s.p50_ms, 2),
                  "p99_ms": round(s.p99_ms, 2)} for s in stats],
    }


def specs(urls: dict[str, str]) -> list[Spec]:
    out: list[Spec] = []
    if "redis" in urls:
        out += [Spec("lease_integrations, Redis", "lease", urls["redis"], "BLPOP wake-up, one waiter"),
                Spec("redis-py Lock", "redis-py", urls["redis"], "polls every 100 ms"),
                Spec("python-redis-lock", "prl", urls["redis"], "BLPOP wake-up")]
    if "postgres" in urls:
        out.append(Spec("lease_integrations, PostgreSQL", "lease", urls["postgres"],
                        "LISTEN/NOTIFY wake-up"))
    if "mongo" in urls:
        out.append(Spec("lease_integrations, MongoDB-wire", "lease", urls["mongo"],
                        "jittered polling"))
    if "sqlite" in urls:
        out.append(Spec("lease_integrations, SQLite", "lease", urls["sqlite"], "jittered polling"))
    return out


def run(urls: dict[str, str], processes: int, rounds: int, seconds: float, hold: float,
        log: Any) -> list[dict[str, Any]]:
    results = []
    for spec in specs(urls):
        log(f"handover: {spec.name} ({processes} processes, {rounds} x {seconds:g} s)")
        try:
            results.append(run_one(spec, processes, rounds, seconds, hold))
        except Exception as exc:
            log(f"handover: {spec.name} failed: {type(exc).__name__}: {exc}")
            results.append({"name": spec.name, "error": f"{type(exc).__name__}: {exc}"})
    return results

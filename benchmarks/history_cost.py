"""What the per-key lease history costs on acquire, and what the metrics
hooks cost when no OpenTelemetry SDK is configured.

1. SQLite store: the shipped ``SqliteStore`` (the history row is inserted and
   the key's history trimmed inside the acquire's own transaction) against
   the same store with its history write turned off (a subclass used only
   here), on separate files in one directory. The history is pre-filled past
   its cap, so every acquire also pays the trim, as in steady state.
2. ``LeaseLock.acquire`` + ``release`` on the memory store (the cheapest
   store, so the hooks' share is the largest it can be) with the metrics hooks
   live (OpenTelemetry API, no SDK) against ``metrics.disable()``.

On a disk, SQLite's commit (fsync, ``synchronous=FULL``) dominates and the
history row rides in the same commit; ``--dir /dev/shm`` (tmpfs, no real
fsync) shows the statements' own CPU cost, the worst case for the ratio.

Contenders run interleaved (A, B, B, A, ...) so load drift on a shared
machine hits both; each round's median is taken, then the median of rounds.
Nothing here asserts a speed: it prints ratios.

    .venv/bin/python benchmarks/history_cost.py [--rounds N] [--cycles N] [--dir PATH]
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from lease_integrations import LeaseLock, connect
from lease_integrations.core import metrics
from lease_integrations.core.store import HISTORY_LIMIT, EventKind
from lease_integrations.stores.sqlite import SqliteStore

HOLDER = "bench:1:0123456789abcdef"
SECRET = "bench-secret-0123456789abcdef"
Timings = dict[str, list[float]]  # "acquire"/"release"/"cycle" -> per-round medians (µs)


class SqliteStoreWithoutHistory(SqliteStore):
    """The shipped store minus its history write: the baseline for the cost."""

    def _add_event(self, conn: sqlite3.Connection, key: str, kind: EventKind, token: int,
                   holder: str | None, detail: Mapping[str, Any] | None = None) -> None:
        return None


assert hasattr(SqliteStore, "_add_event"), "SqliteStore no longer has _add_event: update me"


def store_round(store: SqliteStore, key: str, cycles: int) -> tuple[float, float, float]:
    acquire, release = [], []
    for _ in range(cycles):
        t0 = time.perf_counter_ns()
        result = store.acquire(key, HOLDER, HOLDER, SECRET, 30.0, {"host": "bench", "pid": 1})
        t1 = time.perf_counter_ns()
        assert result.granted and result.record is not None
        store.release(key, SECRET, result.record.token)
        t2 = time.perf_counter_ns()
        acquire.append((t1 - t0) / 1000)
        release.append((t2 - t1) / 1000)
    cycle = [a + r for a, r in zip(acquire, release, strict=True)]
    return statistics.median(acquire), statistics.median(release), statistics.median(cycle)


def lock_round(lock: LeaseLock, cycles: int, hooks: bool) -> tuple[float, float, float]:
    if hooks:
        metrics.use_meter_provider(None)  # the global API provider: no SDK configured
    else:
        metrics.disable()
    acquire, release = [], []
    for _ in range(cycles):
        t0 = time.perf_counter_ns()
        lease = lock.acquire()
        t1 = time.perf_counter_ns()
        lock.release(lease)
        t2 = time.perf_counter_ns()
        acquire.append((t1 - t0) / 1000)
        release.append((t2 - t1) / 1000)
    cycle = [a + r for a, r in zip(acquire, release, strict=True)]
    return statistics.median(acquire), statistics.median(release), statistics.median(cycle)


def interleave(contenders: dict[str, Callable[[], tuple[float, float, float]]],
               rounds: int) -> dict[str, Timings]:
    out: dict[str, Timings] = {n: {"acquire": [], "release": [], "cycle": []} for n in contenders}
    names = list(contenders)
    for i in range(rounds):
        for name in names if i % 2 == 0 else reversed(names):
            a, r, c = contenders[name]()
            out[name]["acquire"].append(a)
            out[name]["release"].append(r)
            out[name]["cycle"].append(c)
    return out


def report(title: str, results: dict[str, Timings], base: str, subject: str) -> None:
    print(title)
    print(f"  {'contender':<34}{'acquire µs':>12}{'release µs':>12}{'cycle µs':>12}")
    med = {n: {k: statistics.median(v) for k, v in t.items()} for n, t in results.items()}
    for name, m in med.items():
        print(f"  {name:<34}{m['acquire']:>12.1f}{m['release']:>12.1f}{m['cycle']:>12.1f}")
    ratio = {k: med[subject][k] / med[base][k] for k in ("acquire", "release", "cycle")}
    print(f"  {'ratio ' + subject.split(',')[0] + ' / baseline':<34}"
          f"{ratio['acquire']:>11.3f}x{ratio['release']:>11.3f}x{ratio['cycle']:>11.3f}x")
    spread = {n: (min(t["acquire"]), max(t["acquire"])) for n, t in results.items()}
    print("  acquire round medians, min..max: "
          + "; ".join(f"{n}: {lo:.1f}..{hi:.1f}" for n, (lo, hi) in spread.items()))
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--cycles", type=int, default=300)
    parser.add_argument("--dir", default=None, help="where the SQLite files go (default: a temp dir)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        shipped = SqliteStore(Path(tmp) / "with-history.db")
        bare = SqliteStoreWithoutHistory(Path(tmp) / "without-history.db")
        key = f"bench-{uuid.uuid4().hex[:8]}"
        for store in (shipped, bare):  # warm up; fill the history past its cap
            store_round(store, key, HISTORY_LIMIT + 50)
        kept = len(shipped.history(key, HISTORY_LIMIT + 50))
        assert HISTORY_LIMIT - 1 <= kept <= HISTORY_LIMIT, kept  # capped: the trim runs
        assert bare.history(key) == []
        sqlite_results = interleave({
            "sqlite, history (shipped)": lambda: store_round(shipped, key, args.cycles),
            "sqlite, no history (baseline)": lambda: store_round(bare, key, args.cycles),
        }, args.rounds)
        shipped.close()
        bare.close()

    lock = LeaseLock(connect(f"memory://bench-{uuid.uuid4().hex}"), "bench", ttl=30.0)
    lock_round(lock, 200, hooks=True)  # imports the API, warms up
    lock_round(lock, 200, hooks=False)
    lock_results = interleave({
        "lock, metrics hooks (API, no SDK)": lambda: lock_round(lock, args.cycles, True),
        "lock, metrics disabled (baseline)": lambda: lock_round(lock, args.cycles, False),
    }, args.rounds)
    metrics.use_meter_provider(None)

    n = f"{args.rounds} rounds x {args.cycles} cycles, interleaved, median of round medians"
    report(f"History cost on acquire: SQLite store, WAL, synchronous=FULL ({n})",
           sqlite_results, "sqlite, no history (baseline)", "sqlite, history (shipped)")
    report(f"Metrics hooks cost: LeaseLock on the memory store ({n})",
           lock_results, "lock, metrics disabled (baseline)", "lock, metrics hooks (API, no SDK)")


if __name__ == "__main__":
    main()

"""What the metrics hooks cost when no OpenTelemetry SDK is configured:
``LeaseLock.acquire`` + ``release`` on the memory store (the cheapest store,
so the hooks' share is the largest it can be) with the hooks live
(OpenTelemetry API, no SDK) against ``metrics.disable()``.

(The history's own cost used to be measured here too, with a SQLite store
whose history write was switched off; the history row is now part of the
acquire's one statement, and ``tests/stores/test_sqlite_writes.py`` counts
what it costs where it matters, in WAL pages per commit: one of four.)

Contenders run interleaved (A, B, B, A, ...) so load drift on a shared
machine hits both; each round's median is taken, then the median of rounds.
Nothing here asserts a speed: it prints ratios.

    .venv/bin/python benchmarks/history_cost.py [--rounds N] [--cycles N]
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable

from lease_integrations import LeaseLock, connect
from lease_integrations.core import metrics

HOLDER = "bench:1:0123456789abcdef"
SECRET = "bench-secret-0123456789abcdef"
Timings = dict[str, list[float]]  # "acquire"/"release"/"cycle" -> per-round medians (µs)


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
    args = parser.parse_args()

    lock = LeaseLock(connect(f"memory://bench-{uuid.uuid4().hex}"), "bench", ttl=30.0)
    lock_round(lock, 200, hooks=True)  # imports the API, warms up
    lock_round(lock, 200, hooks=False)
    lock_results = interleave({
        "lock, metrics hooks (API, no SDK)": lambda: lock_round(lock, args.cycles, True),
        "lock, metrics disabled (baseline)": lambda: lock_round(lock, args.cycles, False),
    }, args.rounds)
    metrics.use_meter_provider(None)

    n = f"{args.rounds} rounds x {args.cycles} cycles, interleaved, median of round medians"
    report(f"Metrics hooks cost: LeaseLock on the memory store ({n})",
           lock_results, "lock, metrics disabled (baseline)", "lock, metrics hooks (API, no SDK)")


if __name__ == "__main__":
    main()

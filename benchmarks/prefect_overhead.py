"""Added wall time of a @leased_flow over a plain @flow.

Runs a trivial flow body under Prefect's test harness (a local server), the
plain and leased variants interleaved so machine load hits both alike, and
prints the median of each and their ratio. Leases live in a SQLite file in a
temp dir; ``--store URL`` measures another store.

    .venv-prefect/bin/python benchmarks/prefect_overhead.py [--runs 15] [--store URL]
        [--quick] [--json PATH]

``--json`` writes ``ratio`` (leased / plain, sync flows with the default UI
annotation), ``plain_s``, ``leased_s``, ``added_ms`` and every variant's
median, for ``python -m benchmarks`` (benchmarks/orchestrators.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

from prefect import flow
from prefect.testing.utilities import prefect_test_harness

from lease_integrations.prefect import leased_flow


def body(n: int = 1) -> int:
    return n + 1


async def abody(n: int = 1) -> int:
    return n + 1


def timed(call: Callable[[], Any]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--store", default=None, help="lease store URL (default: temp SQLite)")
    parser.add_argument("--quick", action="store_true", help="5 runs per variant")
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args()
    if args.quick:
        args.runs = min(args.runs, 5)
    # The harness server is a subprocess: keep it from phoning home.
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    tmp = tempfile.mkdtemp(prefix="lease-bench-")
    store = args.store or f"sqlite://{tmp}/leases.db"

    variants: dict[str, Callable[[], Any]] = {}
    plain = flow(name="plain")(body)
    plain_async = flow(name="plain-async")(abody)
    variants["plain flow"] = plain
    variants["leased flow"] = leased_flow(key="bench", store=store, ttl=30, name="leased")(body)
    variants["leased, no UI annotation"] = leased_flow(
        key="bench-quiet", store=store, ttl=30, annotate=False, name="leased-quiet")(body)
    variants["plain async flow"] = lambda: asyncio.run(plain_async())
    leased_async = leased_flow(key="bench-async", store=store, ttl=30, name="leased-async")(abody)
    variants["leased async flow"] = lambda: asyncio.run(leased_async())

    with prefect_test_harness(server_startup_timeout=180):
        for call in variants.values():  # warm up: first-run registration, imports
            call()
        samples: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(args.runs):
            for name, call in variants.items():
                samples[name].append(timed(call))

    medians = {name: statistics.median(values) for name, values in samples.items()}
    print(f"median wall time of one flow run over {args.runs} runs each (store: {store})")
    print(f"{'variant':28} {'median ms':>10} {'vs plain':>9} {'added ms':>9}")
    for name, median in medians.items():
        base = medians["plain async flow" if "async" in name else "plain flow"]
        print(f"{name:28} {median * 1000:10.1f} {median / base:8.2f}x "
              f"{(median - base) * 1000:9.1f}")
    plain_s, leased_s = medians["plain flow"], medians["leased flow"]
    summary = {"ratio": round(leased_s / plain_s, 3), "plain_s": round(plain_s, 4),
               "leased_s": round(leased_s, 4), "added_ms": round((leased_s - plain_s) * 1000, 1),
               "runs": args.runs, "store": store,
               "variants_ms": {name: round(m * 1000, 1) for name, m in medians.items()}}
    if args.json:
        with open(args.json, "w") as out:
            json.dump(summary, out)


if __name__ == "__main__":
    main()

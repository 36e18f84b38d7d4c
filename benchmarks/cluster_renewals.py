"""Batched renewals on a Redis Cluster: N leases renewed by one ``renew_many``
call on the three-master cluster the tests use (started here, stopped by PID).

Two contenders, interleaved run by run on the same leases and the same store:

- *one call per lease*: ``LeaseStore.renew_many``, the base loop over
  ``renew`` that the Redis store used on a Cluster before (each lease its own
  ``EVALSHA`` round trip; the heartbeat did not batch there at all);
- *one pipeline per node*: ``RedisStore.renew_many`` as it is now (every
  node's pipelined request written before any reply is read).

Round trips are the requests redis-py writes (``SendCounter``); wall and CPU
time are per whole call, medians over the runs with the spread beside them.
Then the same number of ``LeaseLock`` leases kept alive by the heartbeat on
the cluster (``many_keys.run_lease``: CPU %, requests per second).

    python -m benchmarks.cluster_renewals [--leases 1000] [--runs 7] [--windows 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from lease_integrations import connect
from lease_integrations.core.store import LeaseStore, RenewItem

from . import many_keys
from .harness import SendCounter
from .local_servers import redis_cluster
from .tables import table

TTL = 60.0


def _hold(store: LeaseStore, n: int) -> list[RenewItem]:
    tag = uuid.uuid4().hex[:8]
    items: list[RenewItem] = []
    for i in range(n):
        secret = f"bench-secret-{i}"
        got = store.acquire(f"bench-cluster-{tag}-{i}", "bench", secret, TTL, {})
        if not got.granted or got.record is None:
            raise RuntimeError(f"could not take lease {i}")
        items.append((f"bench-cluster-{tag}-{i}", secret, got.record.token, TTL))
    return items


def _once(call: Callable[[Sequence[RenewItem]], Sequence[bool | None]], items: list[RenewItem],
          counter: SendCounter) -> dict[str, float]:
    sent, cpu, wall = counter.count, time.process_time(), time.perf_counter()
    done = call(items)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if list(done) != [True] * len(items):
        raise RuntimeError(f"{len(items) - list(done).count(True)} renewals not done")
    return {"round_trips": counter.count - sent, "wall_ms": wall * 1e3, "cpu_ms": cpu * 1e3}


def _summary(name: str, n: int, samples: list[dict[str, float]]) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "leases": n}
    for k in samples[0]:
        values = [s[k] for s in samples]
        out[k] = round(statistics.median(values), 2)
        out[f"{k}_range"] = [round(min(values), 2), round(max(values), 2)]
    out["runs"] = samples
    return out


def run(url: str, n: int, runs: int, log: Any) -> list[dict[str, Any]]:
    store = connect(url)
    try:
        items = _hold(store, n)
        log(f"cluster renewals: {n} leases held on {url.split('@')[-1]}")
        contenders: dict[str, Callable[[Sequence[RenewItem]], Sequence[bool | None]]] = {
            "one call per lease (before)": lambda batch: LeaseStore.renew_many(store, batch),
            "one pipeline per node (now)": store.renew_many,
        }
        samples: dict[str, list[dict[str, float]]] = {name: [] for name in contenders}
        counter = SendCounter()
        with counter.installed():
            for call in contenders.values():  # warm: every node's connection opened
                _once(call, items, counter)
            for _ in range(runs):
                for name, call in contenders.items():
                    samples[name].append(_once(call, items, counter))
        for key, secret, token, _ in items:
            store.release(key, secret, token)
    finally:
        store.close()
    return [_summary(name, n, s) for name, s in samples.items()]


def heartbeat(url: str, n: int, windows: int, log: Any) -> dict[str, Any]:
    """N LeaseLock leases on one heartbeat on the cluster (many_keys' figure)."""
    result = many_keys.run_lease(url, n, windows, log)
    result["name"] = "heartbeat, 1 process, Redis Cluster"
    return result


def render(results: list[dict[str, Any]]) -> str:
    rows = [[r["name"], r.get("leases"), r.get("round_trips"), r.get("wall_ms"),
             "{:.1f}-{:.1f}".format(*r["wall_ms_range"]) if "wall_ms_range" in r else None,
             r.get("cpu_ms"), r.get("error")] for r in results]
    return table("Redis Cluster (3 primaries): one renew_many call for every lease, median of runs",
                 ["contender", "leases", "round trips", "wall ms", "wall range", "cpu ms", "note"],
                 rows, left=("note", "wall range"))


def many_keys_table(results: list[dict[str, Any]]) -> str:
    rows = [[r["name"], r.get("leases"), r.get("cpu_pct"), r.get("renewals_per_s"),
             r.get("sends_per_s"), r.get("cpu_us_per_renewal"), r.get("lost"), r.get("note")]
            for r in results]
    return table("Redis Cluster: leases kept alive by one heartbeat, over fixed wall windows",
                 ["contender", "leases", "cpu %", "renewals/s", "sends/s", "cpu us/renewal",
                  "lost", "note"], rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.cluster_renewals",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--leases", type=int, default=1000)
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--windows", type=int, default=2, help="heartbeat windows (0: skip)")
    args = p.parse_args(argv)

    def log(message: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    with redis_cluster() as url:
        log(f"started a Redis Cluster at {url}")
        print(render(run(url, args.leases, args.runs, log)))
        if args.windows:
            print(many_keys_table([heartbeat(url, args.leases, args.windows, log)]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

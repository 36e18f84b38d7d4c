"""How many DAG-run keepers one triggerer keeps: renewal lateness at 50, 200
and 500 keepers on one event loop (the triggerer runs every trigger as a
coroutine of one loop), on Redis and PostgreSQL started on loopback.

Each keeper is the real ``DagRunLeaseKeeperTrigger.run()``. Nothing inside is
timed or patched: a sampler reads every record from the store a few times a
second and takes, per lease, the gap between two renewals as the store
stamped them (its clock). Lateness = gap - heartbeat: how far behind its
schedule a renewal lands when N keepers share the process. ``lost`` counts
keepers that ended without their run's release (must be 0).

    .venv-airflow/bin/python benchmarks/keeper_scale.py [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import logging
import os
import secrets
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack, suppress
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="lease-bench-airflow-"))
os.environ.setdefault("AIRFLOW__LEASE_INTEGRATIONS__RUN_SECRET_KEY", secrets.token_hex(16))
os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "ERROR")  # per-lease lines drown the table

from benchmarks import local_servers  # noqa: E402
from benchmarks.tables import table  # noqa: E402
from lease_integrations import LeaseLost, LeaseStore, connect  # noqa: E402
from lease_integrations.airflow.keeper_trigger import DagRunLeaseKeeperTrigger  # noqa: E402
from lease_integrations.airflow.run_lease import (  # noqa: E402
    DagRunLease,
    acquire_for_run,
    run_secret,
)

TTL = 3.0  # --ttl; the heartbeat is ttl/3, as by default


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def grant(store: LeaseStore, key: str, url: str, ttl: float) -> DagRunLease:
    nonce = secrets.token_hex(8)
    result = acquire_for_run(store, key, f"dagrun:bench:{key}", run_secret(key, "bench", key, nonce),
                             ttl, {"dag_id": "bench"})
    assert result.granted and result.record is not None
    return DagRunLease(key=key, token=result.record.token, ttl=ttl, heartbeat=ttl / 3,
                       conn_id="lease_default", dag_id="bench", run_id=key, nonce=nonce,
                       store_url=url)


def release(store: LeaseStore, info: DagRunLease) -> None:
    """What the run's teardown does; a lease already lost is counted by its keeper."""
    lock = info.lock(store)
    with suppress(LeaseLost):
        lock.release(lock.adopt(info.token, info.secret()))


async def one_round(url: str, count: int, seconds: float, ttl: float) -> dict[str, Any]:
    prefix = f"bench-keep-{secrets.token_hex(3)}"
    store = connect(url)
    try:
        infos = [grant(store, f"{prefix}-{i}", url, ttl) for i in range(count)]
        triggers = [DagRunLeaseKeeperTrigger(lease=i.to_xcom(), keeper_task_id="keeper")
                    for i in infos]

        async def first(trigger: DagRunLeaseKeeperTrigger) -> str:
            async for _event in trigger.run():
                return trigger.outcome[0] if trigger.outcome else "?"
            return "?"

        running = [asyncio.ensure_future(first(t)) for t in triggers]
        stamps: dict[str, set[datetime]] = {i.key: set() for i in infos}
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for record in await asyncio.to_thread(store.list, prefix):
                if record.renewed_at is not None and record.key in stamps:
                    stamps[record.key].add(record.renewed_at)
            await asyncio.sleep(ttl / 6)  # renewals are a heartbeat (ttl/3) apart
        early = sum(1 for r in running if r.done())
        for info in infos:
            await asyncio.to_thread(release, store, info)
        outcomes = await asyncio.wait_for(asyncio.gather(*running), 120)
    finally:
        store.close()
    late = []
    for times in stamps.values():
        ordered = sorted(times)
        late += [(b - a).total_seconds() - ttl / 3 for a, b in itertools.pairwise(ordered)]
    lost = sum(1 for o in outcomes if o != "released") + early
    quantiles = statistics.quantiles(late, n=100) if len(late) >= 2 else [float("nan")] * 99
    return {"keepers": count, "renewals": len(late), "p50_ms": quantiles[49] * 1e3,
            "p99_ms": quantiles[98] * 1e3, "max_ms": max(late, default=float("nan")) * 1e3,
            "lost": lost}


def main() -> int:
    logging.getLogger("lease_integrations").setLevel(logging.ERROR)
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="shorter rounds")
    parser.add_argument("--counts", type=int, nargs="+", default=[50, 200, 500])
    parser.add_argument("--stores", nargs="+", default=["redis", "postgres"])
    parser.add_argument("--ttl", type=float, default=TTL,
                        help="lease ttl in seconds (default 3: 20x the renewal rate of ttl 60)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    seconds = (2 if args.quick else 4) * args.ttl
    rows, results = [], []
    with ExitStack() as stack:
        urls, errors = local_servers.start(stack, args.stores, log)
        for kind in args.stores:
            if kind not in urls:
                log(f"{kind}: {errors.get(kind)}")
                continue
            for count in args.counts:
                log(f"{kind}: {count} keepers for {seconds:g} s")
                result = {"store": kind, **asyncio.run(one_round(urls[kind], count, seconds, args.ttl))}
                results.append(result)
                rows.append([kind, count, result["renewals"], result["p50_ms"], result["p99_ms"],
                             result["max_ms"], result["lost"]])
    print(table(f"DAG-run keepers in one event loop (ttl {args.ttl:g} s, heartbeat "
                f"{args.ttl / 3:g} s): "
                "renewal lateness vs schedule",
                ["store", "keepers", "renewals", "p50 ms", "p99 ms", "max ms", "lost"], rows))
    if args.json:
        args.json.write_text(json.dumps({"keeper_scale": results}))
    return 0 if all(r["lost"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())

"""``./run bench``: starts its own servers, runs every section, prints the
tables and the targets of issue 9, and writes everything as JSON to
``benchmarks/results/`` (with the machine and versions it ran on)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from contextlib import ExitStack
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from . import (
    cluster_renewals,
    extras,
    handover,
    keeper_costs,
    local_servers,
    machine,
    many_keys,
    orchestrators,
    redis_cycle,
    store_cycle,
)
from .harness import Result
from .tables import table
from .targets import evaluate, perf_table, render_perf, render_targets

SECTIONS = ("redis", "handover", "many", "cluster", "stores", "objects", "orchestrators", "extras")
RESULTS = Path(__file__).resolve().parent / "results"


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="./run bench", description=__doc__)
    p.add_argument("--quick", action="store_true", help="smoke run (about a minute)")
    p.add_argument("--only", nargs="+", choices=SECTIONS, help="run only these sections")
    p.add_argument("--stores", nargs="+", choices=("sqlite", "postgres", "mongo"),
                   help="stores for the 'stores' and 'handover' sections (default: all)")
    p.add_argument("--runs", type=int, help="runs per cycle figure (median); default 15, quick 5")
    p.add_argument("--dag-run", action="store_true",
                   help="also run the Airflow DAG-run lease latency script (several minutes)")
    p.add_argument("--json", type=Path, help="write results here (default benchmarks/results/)")
    args = p.parse_args(argv)
    if args.runs is not None and args.runs < 1:
        p.error(f"--runs must be at least 1, got {args.runs}")
    return args


def _cycle_rows(results: list[Result], base: Result | None, floor: Result | None) -> list[list[Any]]:
    rows = []
    for r in results:
        ratio = r.ratio_to(base) if base and not r.floor else None
        vs_floor = r.acquire_us / floor.acquire_us if floor and not r.floor else None
        rows.append([r.name, r.cycles_per_s, ratio, r.cpu_us, r.server_cpu_us, r.acquire_us,
                     vs_floor, r.sends_per_cycle, r.sends_acquire])
    return rows


def redis_table(results: list[Result]) -> str:
    base = next(r for r in results if r.name == redis_cycle.BASELINE)
    floor = next(r for r in results if r.floor)
    rows = _cycle_rows(results, base, floor)
    for r, row in zip(results, rows):
        if row[2] is not None:
            low, high = r.ratio_range(base)
            row[2] = f"{row[2]:.2f}x ({low:.2f}-{high:.2f})"
        row[6] = None if row[6] is None else f"{row[6]:.2f}x"
    return table("Uncontended cycle on Redis (acquire + release, one client, one key)",
                 ["contender", "cycles/s", "vs redis-py (runs)", "client cpu us", "server cpu us",
                  "acquire us", "acq/PING", "sends/cycle", "sends/acq"], rows)


def store_table(kind: str, results: list[Result]) -> str:
    rt_floor, write_floor = results[0], results[1]
    rows = []
    for r in results:
        rows.append([r.name, r.cycles_per_s, r.cpu_us, r.acquire_us, None if r.floor else r.release_us,
                     None if r.floor else f"{r.acquire_us / rt_floor.acquire_us:.2f}x",
                     None if r.floor else f"{r.acquire_us / write_floor.acquire_us:.2f}x"])
    return table(f"Uncontended cycle on {kind}", ["contender", "cycles/s", "cpu us/cycle",
                 "acquire us", "release us", "acq/floor", "acq/write floor"], rows)


def handover_table(results: list[dict[str, Any]], processes: int, hold_ms: float) -> str:
    rows = [[r["name"], r.get("throughput_per_s"), r.get("p50_ms"), r.get("p99_ms"),
             r.get("handovers"), r.get("overlaps"), r.get("overtakes"),
             r.get("error") or r.get("note")] for r in results]
    return table(f"Contended handover: {processes} processes, one key, hold {hold_ms:g} ms "
                 "(release start -> next holder's acquire returns)",
                 ["contender", "holds/s", "p50 ms", "p99 ms", "handovers", "overlaps",
                  "overtakes", "note"], rows)


def many_table(results: list[dict[str, Any]]) -> str:
    rows = [[r["name"], r.get("leases"), r.get("cpu_pct"), r.get("keeper_cpu_pct"),
             r.get("renewals_per_s"), r.get("sends_per_s"), r.get("cpu_us_per_renewal"),
             r.get("min_trust_left_s"), r.get("lost"), r.get("error") or r.get("note")]
            for r in results]
    return table("Many keys: leases held by one process, renewal cost over fixed wall windows",
                 ["contender", "leases", "job cpu %", "keeper cpu %", "renewals/s",
                  "job sends/s", "cpu us/renewal", "min trust s", "lost", "note"], rows)


def keeper_costs_table(results: list[dict[str, Any]]) -> str:
    rows = [[r["url_scheme"], r.get("first_hold_ms"), r.get("first_hold_ms_no_keeper"),
             r.get("keeper_ready_ms"), r.get("keeper_rss_mib"), r["runs"]] for r in results]
    return table("The keeper process: first hold in a fresh process, medians",
                 ["store", "first hold ms", "same, LEASE_KEEPER=off", "keeper has the store (ms)",
                  "keeper RSS MiB", "runs"], rows)


def orch_table(results: list[dict[str, Any]]) -> str:
    rows = []
    for r in results:
        rows.append([r["name"], r.get("plain_s"), r.get("leased_s"), r.get("added_ms"),
                     None if r.get("ratio") is None else f"{r['ratio']:.3f}x",
                     r.get("skipped") or r.get("error") or r.get("note")])
    return table("Orchestrator overhead (leased vs plain, median of runs)",
                 ["run", "plain s", "leased s", "added ms", "ratio", "note"], rows)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    quick = args.quick
    # Many short interleaved runs: on a shared two-core host the median of 15
    # paired ratios was stable to a few percent where 5 runs swung by 2x.
    runs = args.runs or (5 if quick else 15)
    seconds = 0.1 if quick else 0.2
    # The smoke run leaves out the orchestrator and extra scripts (minutes of their own).
    sections = args.only or [s for s in SECTIONS if not quick or s not in ("orchestrators", "extras")]
    stores = args.stores or ["sqlite", "postgres", "mongo"]
    if "mongo" in stores and importlib.util.find_spec("lease_integrations.stores.mongo") is None:
        log("no MongoDB store in this checkout yet (lease_integrations/stores/mongo.py): skipped")
        stores.remove("mongo")
    ho: dict[str, Any] = {"processes": 8, "rounds": 1 if quick else 3,
                          "seconds": 1.0 if quick else 2.0, "hold": 0.005}
    out: dict[str, Any] = {"machine": machine.info(), "started": datetime.now(timezone.utc).isoformat(),
                           "config": {"quick": quick, "runs": runs, "trial_seconds": seconds,
                                      "sections": sections, "stores": stores, "handover": ho},
                           "results": {}, "errors": {}}
    printed: list[str] = []

    def show(text: str) -> None:
        printed.append(text)
        print(text, flush=True)

    t0 = time.monotonic()
    with ExitStack() as stack:
        kinds = []
        if {"redis", "handover", "many"} & set(sections):
            kinds.append("redis")
        if {"stores", "handover"} & set(sections):
            kinds += [k for k in ("postgres", "mongo") if k in stores]
        urls, errors = local_servers.start(stack, kinds, log)
        out["errors"].update({f"server {k}": v for k, v in errors.items()})
        if "sqlite" in stores:
            urls["sqlite"] = local_servers.sqlite_url(stack)
        out["servers"] = machine.server_versions(urls)
        res = out["results"]

        if "redis" in sections and "redis" in urls:
            results = redis_cycle.run(urls["redis"], runs, seconds, log, quick=quick)
            base = next(r for r in results if r.name == redis_cycle.BASELINE)
            res["redis_cycle"] = [{**r.as_json(), "ratio_to_redis_py": round(r.ratio_to(base), 3),
                                   "ratio_range": [round(x, 3) for x in r.ratio_range(base)]}
                                  for r in results]
            show(redis_table(results))
        if "stores" in sections:
            res["store_cycle"] = {}
            for kind in stores:
                if kind not in urls:
                    continue
                results = store_cycle.run(kind, urls[kind], runs, seconds, log)
                res["store_cycle"][kind] = [r.as_json() for r in results]
                show(store_table({"sqlite": "SQLite", "postgres": "PostgreSQL",
                                  "mongo": "MongoDB-wire (mongoeco)"}[kind], results))
        if "handover" in sections:
            ho_urls = {k: v for k, v in urls.items() if k == "redis" or k in stores}
            if quick:  # the smoke run keeps the two figures the targets name
                ho_urls = {k: v for k, v in ho_urls.items() if k in ("redis", "postgres")}
            results_h = handover.run(ho_urls, ho["processes"], ho["rounds"], ho["seconds"],
                                     ho["hold"], log)
            res["handover"] = results_h
            show(handover_table(results_h, ho["processes"], ho["hold"] * 1e3))
        if "many" in sections and "redis" in urls:
            results_m = many_keys.run(urls["redis"], 1000, 1 if quick else 3, log, with_prl=not quick)
            res["many_keys"] = results_m
            show(many_table(results_m))
            costs = [keeper_costs.run(urls[k], 3 if quick else 7, log)
                     for k in ("redis", "sqlite") if k in urls]
            res["keeper_costs"] = costs
            show(keeper_costs_table(costs))
        if "cluster" in sections:  # its own three-node cluster, stopped when the section ends
            try:
                with local_servers.redis_cluster() as cluster_url:
                    results_c = cluster_renewals.run(cluster_url, 1000, 3 if quick else 7, log)
                    beat = [] if quick else [cluster_renewals.heartbeat(cluster_url, 1000, 3, log)]
                res["cluster_renewals"] = results_c + beat
                show(cluster_renewals.render(results_c))
                if beat:
                    show(cluster_renewals.many_keys_table(beat))
            except Exception as exc:
                out["errors"]["cluster"] = f"{type(exc).__name__}: {exc}"
                log(f"cluster renewals skipped: {out['errors']['cluster']}")
    if "objects" in sections:
        objects = extras.object_store(quick, log)
        res["object_store"] = objects
        show("Object storage: the bucket store and fenced outputs (benchmarks/object_store.py)\n"
             + (objects.get("output") or objects.get("error", "")) + "\n")
    if "orchestrators" in sections:
        results_o = orchestrators.run(quick, log, dag_run=args.dag_run)
        res["orchestrators"] = results_o
        show(orch_table(results_o))
        for r in results_o:
            if r.get("output"):
                show(f"{r['name']} ({r.get('note')})\n{r['output']}\n")

    if "extras" in sections:
        hist = extras.history_cost(quick, log)
        res["history_cost"] = hist
        show("Metrics hooks cost (benchmarks/history_cost.py)\n"
             + (hist.get("output") or hist.get("skipped") or hist.get("error", "")) + "\n")
        burst = extras.keeper_burst(quick, log)
        res["keeper_burst"] = burst
        show("A burst of holders (benchmarks/keeper_burst.py)\n"
             + (burst.get("output") or burst.get("error", "")) + "\n")
        keepers = extras.keeper_scale(quick, log)
        res["keeper_scale"] = keepers
        show("DAG-run keepers per triggerer (benchmarks/keeper_scale.py)\n"
             + (keepers.get("output") or keepers.get("skipped") or keepers.get("error", "")) + "\n")

    out["targets"] = evaluate(res)
    out["performance"] = perf_table(res)
    out["machine"]["loadavg_end"] = list(os.getloadavg())
    out["elapsed_s"] = round(time.monotonic() - t0, 1)
    path = args.json or RESULTS / f"bench-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    # Written before the last prints: a closed stdout pipe loses nothing.
    path.write_text(json.dumps(out, indent=2, default=str))
    show(render_targets(out["targets"]))
    show(render_perf(out["performance"]))
    m = out["machine"]
    print(f"{m['cpu']}, {m['cores']} cores, Python {m['python']}; servers: "
          + ", ".join(f"{k} {v}" for k, v in out["servers"].items())
          + f"; load average {m['loadavg_start'][0]:.1f} -> {m['loadavg_end'][0]:.1f}")
    print(f"results: {path} ({out['elapsed_s']:g} s)")
    return 0

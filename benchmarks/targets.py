"""The targets of issue 9, checked against one run's results. A report, not
a test: a missed target is printed with its figure, never raised."""

from __future__ import annotations

from typing import Any

from .redis_cycle import BASELINE
from .tables import table

RAW, LOCK = "lease_integrations store calls", "lease_integrations LeaseLock"


def _by_name(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in rows}


def _check(out: list[dict[str, Any]], target: str, ok: bool | None, measured: str) -> None:
    out.append({"target": target, "measured": measured,
                "status": "n/a" if ok is None else "met" if ok else "MISSED"})


def _redis(rows: list[dict[str, Any]], out: list[dict[str, Any]]) -> None:
    by = _by_name(rows)
    floor = next(r for r in rows if r["floor"])
    for name in (RAW, LOCK):
        sends = by[name]["sends_per_cycle"]
        _check(out, f"Redis cycle = 2 round trips ({name})", sends == 2, f"{sends} sends/cycle")
    for name, want in ((RAW, 0.9), (LOCK, 0.8)):
        ratio = by[name]["ratio_to_redis_py"]
        cpu = by[name]["client_cpu_us_per_cycle"] / by[BASELINE]["client_cpu_us_per_cycle"]
        low, high = by[name]["ratio_range"]
        _check(out, f"{name} >= {want}x redis-py Lock", ratio >= want,
               f"{ratio:.2f}x cycles/s (runs {low:.2f}-{high:.2f}; {cpu:.2f}x client CPU per cycle)")
    rivals = [r for r in rows if r["name"].startswith(("python-redis-lock", "pottery"))]
    for name in (RAW, LOCK):
        mine = by[name]["ratio_to_redis_py"]
        behind = [r["name"] for r in rivals if r["ratio_to_redis_py"] >= mine]
        _check(out, f"{name} ahead of python-redis-lock and pottery", not behind,
               "ahead of all" if not behind else "behind " + ", ".join(behind))
    ratio = by[RAW]["acquire_us_p50"] / floor["acquire_us_p50"]
    _check(out, "Redis acquire <= 1.5x PING", ratio <= 1.5,
           f"{by[RAW]['acquire_us_p50']:.0f} us vs {floor['acquire_us_p50']:.0f} us = {ratio:.2f}x")


def _stores(cycles: dict[str, list[dict[str, Any]]], out: list[dict[str, Any]]) -> None:
    for kind, rows in cycles.items():
        by = _by_name(rows)
        # SQLite has no round trip: its floor is the durable write an acquire must make.
        floor = rows[1] if kind == "sqlite" else rows[0]
        ratio = by[RAW]["acquire_us_p50"] / floor["acquire_us_p50"]
        _check(out, f"{kind} acquire <= 1.5x {floor['name']}", ratio <= 1.5,
               f"{by[RAW]['acquire_us_p50']:.0f} us vs {floor['acquire_us_p50']:.0f} us "
               f"= {ratio:.2f}x")


def _handover(rows: list[dict[str, Any]], out: list[dict[str, Any]]) -> None:
    for r in rows:
        if r["name"] in ("lease_integrations, Redis", "lease_integrations, PostgreSQL"):
            p50 = r.get("p50_ms")
            _check(out, f"handover p50 < 5 ms ({r['name']})",
                   None if p50 is None else p50 < 5.0,
                   r.get("error") or f"p50 {p50} ms, p99 {r.get('p99_ms')} ms")
        if r.get("overlaps"):
            _check(out, f"no two holders at once ({r['name']})", False, f"{r['overlaps']} overlaps")


def _orchestrators(rows: list[dict[str, Any]], out: list[dict[str, Any]]) -> None:
    for r in rows:
        if r.get("target") is False:
            continue
        plain, leased = r.get("plain_s"), r.get("leased_s")
        if plain is None or leased is None:
            _check(out, f"{r['name']}: < 5 % or < 50 ms added", None,
                   r.get("skipped") or r.get("error") or f"ratio {r.get('ratio')}")
            continue
        added, limit = leased - plain, max(0.05 * plain, 0.05)
        _check(out, f"{r['name']}: < 5 % or < 50 ms added", added < limit,
               f"+{added * 1e3:.0f} ms on {plain:.2f} s (limit {limit * 1e3:.0f} ms)")


def evaluate(results: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if "redis_cycle" in results:
        _redis(results["redis_cycle"], out)
    if "store_cycle" in results:
        _stores(results["store_cycle"], out)
    if "handover" in results:
        _handover(results["handover"], out)
    if "orchestrators" in results:
        _orchestrators(results["orchestrators"], out)
    return out


def render_targets(rows: list[dict[str, Any]]) -> str:
    return table("Targets (issue 9)", ["target", "status", "measured"],
                 [[r["target"], r["status"], r["measured"]] for r in rows],
                 left=("status", "measured"))

"""Collects one row per (store, fault) and prints the table at the end."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

ROWS: list[dict[str, object]] = []


@pytest.fixture(scope="session", autouse=True)
def safety_table() -> Iterator[list[dict[str, object]]]:
    yield ROWS
    if not ROWS:
        return
    head = ("store", "fault", "grants", "overlaps (explained)", "stale writes rejected",
            "recovery after SIGKILL (median)", "lost records")
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    for row in ROWS:
        lines.append(" | ".join(str(row.get(k, "")) for k in head))
    sys.stdout.write("\n\nsafety results\n" + "\n".join(lines) + "\n")


def record(store_url: str, fault: str, verdict: object, **extra: object) -> None:
    from history import Verdict

    assert isinstance(verdict, Verdict)
    ROWS.append({
        "store": store_url.split(":")[0],
        "fault": fault,
        "grants": len(verdict.grants),
        "overlaps (explained)": f"{len(verdict.overlaps_explained)} ({len(verdict.overlaps_explained)})"
        if not verdict.rule2 else f"{len(verdict.overlaps_explained) + len(verdict.rule2)} "
                                  f"({len(verdict.overlaps_explained)})",
        "stale writes rejected": verdict.stale_writes_rejected,
        "lost records": len(verdict.rule4),
        **extra,
    })

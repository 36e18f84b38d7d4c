"""Collects one row per (store, fault) and prints the table at the end."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

ROWS: list[dict[str, object]] = []


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The store x fault table, printed after the run even under -q."""
    if not ROWS:
        return
    head = ("store", "fault", "grants", "overlaps (explained)", "stale writes rejected",
            "recovery after SIGKILL (median)", "lost records")
    terminalreporter.section("safety results")
    terminalreporter.write_line(" | ".join(head))
    terminalreporter.write_line(" | ".join("---" for _ in head))
    for row in ROWS:
        terminalreporter.write_line(" | ".join(str(row.get(k, "")) for k in head))


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

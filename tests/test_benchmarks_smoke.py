"""The benchmark runner still runs: ``python -m benchmarks --quick`` on the
SQLite store only (no server), checked for the shape of its JSON. Nothing
here asserts a speed; it guards the benchmarks against rotting as the
library's API moves."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_quick_sqlite_run_writes_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--only", "stores", "--stores", "sqlite",
         "--runs", "1", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Uncontended cycle on SQLite" in proc.stdout
    data = json.loads(out.read_text())
    rows = {r["name"]: r for r in data["results"]["store_cycle"]["sqlite"]}
    for name in ("lease_integrations store calls", "lease_integrations LeaseLock"):
        assert rows[name]["cycles_per_s"] > 0
        assert rows[name]["acquire_us_p50"] > 0
    assert sum(r["floor"] for r in rows.values()) == 2
    assert [t["target"] for t in data["targets"]] == [
        "sqlite acquire <= 1.5x 1-row write txn (write floor)"]
    assert data["machine"]["python"] and data["servers"]["sqlite"]

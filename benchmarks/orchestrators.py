"""Orchestrator overhead: runs ``benchmarks/airflow_overhead.py`` and
``benchmarks/prefect_overhead.py`` (each in its own environment, since
Airflow and Prefect cannot share one) and collects what they report.

Contract with those scripts: called as ``python SCRIPT [--quick] --json PATH``
from the repository root; they write one JSON object to PATH (or, failing
that, print it as the last line of stdout) holding at least ``ratio``
(leased wall time / plain wall time, median of runs); ``plain_s``,
``leased_s`` and ``added_ms`` are shown when present.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: name -> (script, environment, is one of issue 9's targets). The DAG-run
#: script drives a real scheduler for minutes: only with ``--dag-run``.
SCRIPTS = {"Airflow task": ("airflow_overhead.py", ".venv-airflow", True),
           "Prefect flow": ("prefect_overhead.py", ".venv-prefect", True)}
DAG_RUN = {"Airflow DAG-run lease, gap between tasks": (
    "airflow_dag_run_lease_latency.py", ".venv-airflow", False)}
TIMEOUT = 600


def _parse(path: Path, stdout: str) -> dict[str, Any] | None:
    if path.exists() and path.stat().st_size:
        try:
            data = json.loads(path.read_text())
            return data if isinstance(data, dict) else {"result": data}
        except ValueError:
            pass
    for line in reversed(stdout.strip().splitlines()):
        try:
            data = json.loads(line)
        except ValueError:
            continue
        return data if isinstance(data, dict) else {"result": data}
    return None


def run_one(name: str, quick: bool, log: Any) -> dict[str, Any]:
    script, venv, target = {**SCRIPTS, **DAG_RUN}[name]
    path, python = ROOT / "benchmarks" / script, ROOT / venv / "bin" / "python"
    if not path.exists():
        return {"name": name, "skipped": f"benchmarks/{script} not present"}
    if not python.exists():
        return {"name": name, "skipped": f"{venv} not built (./run setup)"}
    log(f"orchestrators: {script} in {venv}")
    with tempfile.TemporaryDirectory(prefix="lease-bench-orch-") as tmp:
        out = Path(tmp) / "result.json"
        # The DAG-run script drives a real scheduler: its own --quick keeps it short.
        fast = quick or not target
        cmd = [str(python), str(path), *(["--quick"] if fast else []), "--json", str(out)]
        try:
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT)
            if proc.returncode == 2 and "unrecognized arguments" in proc.stderr:
                # A script that does not speak the contract yet: run it bare, show its output.
                proc = subprocess.run(cmd[:2], cwd=ROOT, capture_output=True, text=True,
                                      timeout=TIMEOUT)
                if proc.returncode == 0 and _parse(out, proc.stdout) is None:
                    return {"name": name, "target": target, "output": proc.stdout.rstrip(),
                            "note": f"{script} has no --json yet: its own output below"}
        except subprocess.TimeoutExpired:
            return {"name": name, "error": f"timed out after {TIMEOUT} s"}
        data = _parse(out, proc.stdout)
    if proc.returncode != 0 or data is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        return {"name": name, "target": target,
                "error": f"exit {proc.returncode}: " + " | ".join(tail)}
    return {"name": name, "target": target, **data}


def run(quick: bool, log: Any, dag_run: bool = False) -> list[dict[str, Any]]:
    return [run_one(name, quick, log) for name in [*SCRIPTS, *(DAG_RUN if dag_run else [])]]

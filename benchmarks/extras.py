"""Benchmarks other helpers own that print their own tables: run them and
show their output verbatim, so one ``./run bench`` shows everything."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 300
BURST_TIMEOUT = 1800  # up to 12 bursts of 32 interpreters on a busy host


def history_cost(quick: bool, log: Any) -> dict[str, Any]:
    path = ROOT / "benchmarks" / "history_cost.py"
    if not path.exists():
        return {"name": "history_cost", "skipped": "benchmarks/history_cost.py not present"}
    log("extras: history_cost.py")
    args = ["--rounds", "3", "--cycles", "100"] if quick else ["--rounds", "5"]
    try:
        proc = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), str(path), *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return {"name": "history_cost", "error": f"timed out after {TIMEOUT} s"}
    if proc.returncode != 0:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
        return {"name": "history_cost", "error": f"exit {proc.returncode}: {tail}"}
    return {"name": "history_cost", "output": proc.stdout.rstrip()}


def keeper_scale(quick: bool, log: Any) -> dict[str, Any]:
    """DAG-run keepers per triggerer (needs the Airflow environment)."""
    python = ROOT / ".venv-airflow" / "bin" / "python"
    if not python.exists():
        return {"name": "keeper_scale", "skipped": ".venv-airflow not built (./run setup)"}
    log("extras: keeper_scale.py")
    cmd = [str(python), str(ROOT / "benchmarks" / "keeper_scale.py"), *(["--quick"] if quick else [])]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return {"name": "keeper_scale", "error": f"timed out after {TIMEOUT} s"}
    table = proc.stdout.rstrip()
    if not table:
        tail = " | ".join(proc.stderr.strip().splitlines()[-5:])
        return {"name": "keeper_scale", "error": f"exit {proc.returncode}: {tail}"}
    return {"name": "keeper_scale", "output": table}


def object_store(quick: bool, log: Any) -> dict[str, Any]:
    """The bucket store and the fenced commit against plain S3 calls on moto
    (needs boto3 and moto[server]: the [test] extra)."""
    log("objects: object_store.py (moto's S3 server)")
    cmd = [str(ROOT / ".venv" / "bin" / "python"), str(ROOT / "benchmarks" / "object_store.py"),
           *(["--quick"] if quick else [])]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return {"name": "object_store", "error": f"timed out after {TIMEOUT} s"}
    if proc.returncode != 0:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
        return {"name": "object_store", "error": f"exit {proc.returncode}: {tail}"}
    return {"name": "object_store", "output": proc.stdout.rstrip()}


def keeper_burst(quick: bool, log: Any) -> dict[str, Any]:
    """32 holders started at once beside 2 busy processes, keeper on and off:
    leases lost and the memory of what the library started beside them."""
    log("extras: keeper_burst.py (32 holders at once, SQLite and Redis)")
    cmd = [str(ROOT / ".venv" / "bin" / "python"), "-m", "benchmarks.keeper_burst",
           "--bursts", "1" if quick else "3"]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=BURST_TIMEOUT)
    except subprocess.TimeoutExpired:
        return {"name": "keeper_burst", "error": f"timed out after {BURST_TIMEOUT} s"}
    if proc.returncode != 0:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
        return {"name": "keeper_burst", "error": f"exit {proc.returncode}: {tail}"}
    table = proc.stdout.rstrip().split("a burst of holders", 1)
    return {"name": "keeper_burst", "output": "a burst of holders" + table[-1]}

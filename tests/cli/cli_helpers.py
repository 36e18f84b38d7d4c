"""Helpers the console tests share: the leasectl runner, table parsing, bounded polls."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

#: The console script the package installs; ``-m`` only where it is missing.
SCRIPT = Path(sys.executable).parent / "leasectl"
COMMAND = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "lease_integrations.cli"]


@dataclass
class Result:
    code: int
    out: str
    err: str


Leasectl = Callable[..., Result]


def run_leasectl(*args: str, env: dict[str, str] | None = None) -> Result:
    """Run leasectl with a clean environment: no inherited LEASE_STORE_URL
    unless the test sets one."""
    full_env = {k: v for k, v in os.environ.items() if k != "LEASE_STORE_URL"}
    full_env.update(env or {})
    proc = subprocess.run([*COMMAND, *args], capture_output=True, text=True, timeout=120,
                          env=full_env, stdin=subprocess.DEVNULL)
    return Result(proc.returncode, proc.stdout, proc.stderr)


def table_rows(text: str, header_start: str) -> list[dict[str, str]]:
    """Rows of a leasectl table as dicts, columns split on runs of 2+ spaces."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    headers = re.split(r"\s{2,}", lines[start].strip())
    rows = []
    for line in lines[start + 1:]:
        if not line.strip():
            break
        cells = re.split(r"\s{2,}", line.strip())
        rows.append(dict(zip(headers, cells + [""] * (len(headers) - len(cells)), strict=True)))
    return rows


def poll(check: Callable[[], T | None], timeout: float, what: str, interval: float = 0.05) -> T:
    """Call ``check`` until it returns something truthy, or fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)

"""Processes that open one new SQLite file at the same moment (two breakers
and two takers of a test, workers of a pool starting together) must all
connect. Switching a file to WAL takes a read lock and then upgrades it;
SQLite answers the second of two upgraders "database is locked" at once,
without the busy handler (waiting there could deadlock), so opening waits
for the first switch instead of failing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import lease_integrations

WORKER = Path(__file__).with_name("sqlite_open_race.py")
PROJECT = Path(lease_integrations.__file__).parent.parent


def test_processes_opening_a_new_file_together_all_connect(tmp_path: Path) -> None:
    # 40 rounds of 8 openers: before the fix about one round in five lost
    # an opener to "database is locked".
    run = subprocess.run([sys.executable, str(WORKER), str(tmp_path), "40", "8"],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(PROJECT)})
    assert run.returncode == 0, run.stderr
    errors = json.loads(run.stdout)
    assert errors == [], f"{len(errors)} of 320 openers failed, first: {errors[0]}"

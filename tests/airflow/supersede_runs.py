"""Helpers for the supersede tests: a ``dag.test()`` of a DAG in
``supersede_dags/`` in a process of its own, the events its callables
recorded, the fenced rows, and the try states in the metadata DB."""

from __future__ import annotations

import json
import os
import select
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from harness import AIRFLOW_2

DAGS = Path(__file__).resolve().parent / "supersede_dags"
SCRIPT = """
import inspect, json, runpy, sys
from datetime import datetime
dags = runpy.run_path(sys.argv[1])
dag = dags[sys.argv[2]]
date = datetime.fromisoformat(sys.argv[3])
name = "logical_date" if "logical_date" in inspect.signature(dag.test).parameters \\
    else "execution_date"
dr = dag.test(**{name: date})
states = {ti.task_id: str(getattr(ti.state, "value", ti.state)) for ti in dr.get_task_instances()}
print("RESULT " + json.dumps({"run_id": dr.run_id, "state": str(getattr(dr.state, "value",
      dr.state)), "tasks": states}), flush=True)
"""


class DagTest:
    """``dag.test(logical_date=...)`` of ``dag_id`` in its own process."""

    def __init__(self, dag_id: str, date: str, records: Path, airflow_home: Path,
                 log: Path) -> None:
        self.log = log
        env = {**os.environ, "SUPERSEDE_RECORD_DIR": str(records),
               "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS)}
        with open(log, "wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-c", SCRIPT, str(DAGS / "supersede_dags.py"), dag_id, date],
                env=env, cwd=str(airflow_home), stdout=out, stderr=subprocess.STDOUT)

        self.ended_at: float | None = None  # wall clock when the process ended (pidfd)
        self._pidfd = os.pidfd_open(self.process.pid)
        self._watch = threading.Thread(target=self._wait_exit, daemon=True)
        self._watch.start()

    def _wait_exit(self) -> None:
        """The kernel says when the process ends (it is then a zombie until
        reaped): readable pidfd, not a poll of ``waitpid``."""
        select.select([self._pidfd], [], [])
        self.ended_at = time.time()

    def ended(self, timeout: float) -> float:
        self._watch.join(timeout)
        assert self.ended_at is not None, self.output()[-3000:]
        return self.ended_at

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def result(self) -> dict[str, Any] | None:
        lines = [line for line in self.output().splitlines() if line.startswith("RESULT ")]
        return json.loads(lines[-1][len("RESULT "):]) if lines else None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)
        self._watch.join(5)
        os.close(self._pidfd)


def events(records: Path, kind: str | None = None, **match: Any) -> list[dict[str, Any]]:
    path = records / "events.jsonl"
    if not path.exists():
        return []
    found = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [e for e in found if (kind is None or e["event"] == kind)
            and all(e.get(k) == v for k, v in match.items())]


def rows(records: Path) -> list[tuple[int, int, float]]:
    """(token, pid, t) of every accepted write, in commit order; none yet
    while the writer has made the file but not its table (a poll can read
    between the two: a CI run failed on "no such table")."""
    path = records / "rows.db"
    if not path.exists():
        return []
    with sqlite3.connect(path) as db:
        if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'rows'").fetchone():
            return []
        return [(int(a), int(b), float(c)) for a, b, c in
                db.execute("SELECT token, pid, t FROM rows ORDER BY rowid")]


def try_states(airflow_home: Path, dag_id: str, task_id: str) -> list[tuple[str, str, int]]:
    """(run_id, state, try_number) of each try of ``task_id`` in the metadata DB."""
    with sqlite3.connect(airflow_home / "airflow.db") as db:
        return [(str(r), str(s), int(n)) for r, s, n in db.execute(
            "SELECT run_id, state, try_number FROM task_instance WHERE dag_id = ? "
            "AND task_id = ?", (dag_id, task_id))]


__all__ = ["AIRFLOW_2", "DAGS", "DagTest", "events", "rows", "try_states"]

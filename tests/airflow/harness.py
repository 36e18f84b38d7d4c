"""Helpers the Airflow tests share: reading recorded events, gates, bounded
polls, and a DAG run in its own process."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
#: Read from the installed distribution, so this never imports Airflow (the
#: conftest sets AIRFLOW_HOME first). 2.11 runs tasks under LocalTaskJob, its
#: REST API is /api/v1 behind the Flask webserver, and it has no Task SDK.
AIRFLOW_2 = int(version("apache-airflow").split(".")[0]) < 3
WAIT = 180.0  # upper bound for anything a test waits on (never reached when all is well)


def dag_bag_class() -> Any:
    """Airflow's DagBag, which 3.0 moved (import it only once AIRFLOW_HOME is set)."""
    try:
        from airflow.dag_processing.dagbag import DagBag
    except ImportError:  # Airflow 2.11
        from airflow.models.dagbag import DagBag
    return DagBag


def events(record_dir: Path) -> list[dict[str, Any]]:
    path = record_dir / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def open_gate(record_dir: Path, name: str) -> None:
    (record_dir / name).touch()


def wait_until(predicate: Any, what: str, timeout: float = WAIT) -> Any:
    """A bounded poll on something observable (a file, a store record)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class DagProcess:
    """``run_dags.py`` in its own process; output goes to a file, not a pipe,
    so a chatty Airflow can never block on a full pipe."""

    def __init__(self, log: Path, specs: tuple[str, ...], env: dict[str, str], cwd: Path) -> None:
        self.log = log
        self._out = open(log, "wb")  # noqa: SIM115 - closed in wait()/kill()
        self.process = subprocess.Popen(
            [sys.executable, str(HERE / "run_dags.py"), *specs],
            stdout=self._out, stderr=subprocess.STDOUT, env=env, cwd=str(cwd),
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for_text(self, text: str, timeout: float = WAIT) -> None:
        def seen() -> bool:
            if self.process.poll() is not None and text not in self.output():
                raise AssertionError(f"process ended before printing {text!r}:\n{self.tail()}")
            return text in self.output()

        wait_until(seen, f"{text!r} in {self.log.name}", timeout)

    def wait(self, timeout: float = WAIT) -> list[dict[str, Any]]:
        try:
            self.process.wait(timeout)
        finally:
            self._out.close()
        results = [json.loads(line[len("RESULT "):]) for line in self.output().splitlines()
                   if line.startswith("RESULT ")]
        return results

    def kill(self, sig: int) -> None:
        self.process.send_signal(sig)

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.output().splitlines()[-lines:])

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)
        self._out.close()


def result_for(results: list[dict[str, Any]], dag_id: str) -> dict[str, Any]:
    matching = [r for r in results if r["dag_id"] == dag_id]
    assert matching, f"no result for {dag_id} in {results}"
    return matching[-1]

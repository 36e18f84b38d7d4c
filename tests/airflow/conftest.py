"""Airflow test harness: a throwaway AIRFLOW_HOME with a migrated SQLite
metadata DB, and helpers that run DAGs through ``dag.test()`` in separate
processes (so two runs can really overlap, and a process can be killed).

AIRFLOW_HOME is set at import, before anything imports Airflow (Airflow reads
its configuration once, at import time)."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import WAIT, DagProcess

HERE = Path(__file__).resolve().parent
DAGS = HERE / "dags"
BIN = Path(sys.executable).parent
HOME = Path(tempfile.mkdtemp(prefix="lease-airflow-home-"))
ROOT = HERE.parents[1]

# Every Airflow process the tests start (dag.test() runners, the scheduler's
# components and the task processes they fork) imports this checkout's
# package, not whichever checkout the virtualenv's editable install points at.
_path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *(p for p in _path if p != str(ROOT))])

os.environ.pop("LEASE_STORE_URL", None)
os.environ.pop("AIRFLOW_CONN_LEASE_DEFAULT", None)
os.environ.update({
    "AIRFLOW_HOME": str(HOME),
    "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{HOME}/airflow.db",
    "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
    # The DAG-run lease refuses the Task SDK's unexpanded '{FERNET_KEY}'.
    "AIRFLOW__LEASE_INTEGRATIONS__RUN_SECRET_KEY": secrets.token_urlsafe(32),
    "PYTHONDONTWRITEBYTECODE": "1",
})



@pytest.fixture(scope="session")
def airflow_home() -> Iterator[Path]:
    """One migrated metadata DB for the session (migrating takes seconds)."""
    subprocess.run([str(BIN / "airflow"), "db", "migrate"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=WAIT)
    # Every dag.test() syncs the whole DAG folder into the metadata DB first;
    # processes started together would race to INSERT the same new DAG rows
    # (UNIQUE constraint failed: dag.dag_id). Sync once here, serially.
    subprocess.run([str(BIN / "airflow"), "dags", "reserialize"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=WAIT)
    yield HOME
    shutil.rmtree(HOME, ignore_errors=True)


@pytest.fixture
def record_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the test DAGs record events and look for gate files; also gives
    the test its own lease store, so tests never see each other's leases."""
    directory = tmp_path / "records"
    directory.mkdir()
    monkeypatch.setenv("LEASE_TEST_RECORD_DIR", str(directory))
    monkeypatch.setenv("LEASE_STORE_URL", f"sqlite://{tmp_path}/leases.db")
    return directory


@pytest.fixture
def run_dags(airflow_home: Path, record_dir: Path, tmp_path: Path) -> Iterator[Any]:
    """``run_dags("dag_a", "dag_b@2026-01-02T00:00:00+00:00", name=...)`` starts
    one process running those DAGs in order; every process is stopped (by its
    PID) at the end of the test."""
    started: list[DagProcess] = []

    def start(*specs: str, name: str = "run", env: dict[str, str] | None = None) -> DagProcess:
        proc = DagProcess(tmp_path / f"{name}.log", specs, {**os.environ, **(env or {})}, HOME)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.stop()



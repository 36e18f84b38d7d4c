"""Smoke test of the Airflow face, run on the oldest and the newest supported
Airflow (scripts/test.sh): the package imports, the provider entry point
registers ``@task.leased``, and a leased DAG runs through Airflow's own
``dag.test()``: once with the lease free (both tasks run, each with its own
grant), once while another holder has the key (both tasks skip). And the
fail-stop path: a task whose lease is broken from outside (as ``leasectl
break`` does) ends the process running it with status 75 before its body can
finish, and the try is not a success.

Everything Airflow runs in child processes with their own throwaway
AIRFLOW_HOME, so this file runs beside the full Airflow suite or alone."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from smoke_support import WAIT, Child, wait_until

from lease_integrations import LEASE_LOST_EXIT_STATUS, LeaseLock, connect

pytest.importorskip("airflow")

DAGS = Path(__file__).resolve().parent / "airflow_dags"


@pytest.fixture(scope="module")
def airflow_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    home = tmp_path_factory.mktemp("airflow-home")
    env = {k: v for k, v in os.environ.items()
           if k not in ("LEASE_STORE_URL", "AIRFLOW_CONN_LEASE_DEFAULT")}
    env.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        # Airflow >= 3.1's dag.test() runs only a DAG it finds in the DAG folder.
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "PYTHONDONTWRITEBYTECODE": "1",
    })
    migrate = subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=WAIT)
    assert migrate.returncode == 0, migrate.stdout.decode(errors="replace")[-4000:]
    return env


def _run_dag(env: dict[str, str], tmp_path: Path, name: str) -> tuple[dict[str, str], dict[str, int]]:
    out = tmp_path / name
    out.mkdir()
    child = Child("airflow_dags/airflow_smoke_dag.py", [],
                  {**env, "LEASE_SMOKE_DIR": str(out),
                   "LEASE_STORE_URL": f"sqlite://{tmp_path}/leases.db"},
                  tmp_path / f"{name}.log")
    try:
        result = child.result()
    finally:
        child.stop()
    assert result["registered"], "the provider entry point did not register task.leased"
    tokens = {p.stem: int(p.read_text()) for p in out.glob("*.token")}
    if "failed" in result["tasks"].values():
        print(child.output()[-6000:])  # pytest shows it beside the failed assertion
    return result["tasks"], tokens


@pytest.mark.timeout(900)  # Airflow/Prefect start-up on a loaded 2-core machine
def test_leased_tasks_run_through_dag_test(airflow_env: dict[str, str], tmp_path: Path) -> None:
    key = "lease-smoke"  # the DAG's key; this test's store file is its own
    tasks, tokens = _run_dag(airflow_env, tmp_path, "free")
    assert tasks == {"decorated": "success", "operator": "success"}, tasks
    # One grant each, in order, and both given back (a later holder gets the key).
    assert tokens["operator"] > tokens["decorated"], tokens
    store = connect(f"sqlite://{tmp_path}/leases.db")
    try:
        record = store.get(key)
        assert record is not None and record.token == tokens["operator"]
        lock = LeaseLock(store, key, ttl=30)
        held = lock.acquire(wait=0)
        try:
            busy_tasks, busy_tokens = _run_dag(airflow_env, tmp_path, "busy")
        finally:
            lock.release(held)
    finally:
        store.close()
    assert busy_tasks == {"decorated": "skipped", "operator": "skipped"}, busy_tasks
    assert busy_tokens == {}, "a task body ran while another holder had the lease"


@pytest.mark.timeout(900)
def test_broken_lease_ends_the_try(airflow_env: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "lost"
    out.mkdir()
    url = f"sqlite://{tmp_path}/leases.db"
    child = Child("airflow_dags/airflow_smoke_dag.py", ["lost"],
                  {**airflow_env, "LEASE_SMOKE_DIR": str(out), "LEASE_STORE_URL": url},
                  tmp_path / "lost.log")
    try:
        token = int(wait_until(lambda: (out / "held.token").exists() and
                               (out / "held.token").read_text(), "the task to enter its body"))
        with connect(url) as store:
            broken = store.force_release("lease-smoke-lost", by="smoke-test")
        assert broken is not None and broken.token == token, broken
        code = child.process.wait(WAIT)
    finally:
        child.stop()
    log = child.output()
    assert code == LEASE_LOST_EXIT_STATUS, f"exit {code}:\n{log[-4000:]}"
    assert not (out / "ended").exists(), "the task body ran on after its lease was broken"
    # dag.test() runs the task in this very process, so nothing is left to
    # record the failure (docs/airflow/index.md): the try is not a success.
    with sqlite3.connect(Path(airflow_env["AIRFLOW_HOME"]) / "airflow.db") as db:
        states = {s for (s,) in db.execute(
            "SELECT state FROM task_instance WHERE dag_id = 'lease_smoke_lost'")}
    assert states and "success" not in states, states

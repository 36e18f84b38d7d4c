"""``leasectl --airflow-conn``: the console finds the store the way Airflow
tasks do, through an Airflow Connection (here ``AIRFLOW_CONN_*``, read by
Airflow's own secrets backend), run from the Airflow environment's leasectl."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import Leasectl

from lease_integrations import connect
from lease_integrations.console import exits

ROOT = Path(__file__).resolve().parents[2]
AIRFLOW_LEASECTL = ROOT / ".venv-airflow" / "bin" / "leasectl"


def test_airflow_conn_and_url_together_is_a_usage_error(leasectl: Leasectl) -> None:
    result = leasectl("--url", "sqlite:///x.db", "--airflow-conn", "lease_ops", "list")
    assert result.code == exits.USAGE
    assert "only one of --url, --airflow-conn" in result.err


def has_airflow() -> bool:
    """Asked of a fresh interpreter: inside pytest, tests/airflow would pass
    for a namespace package called ``airflow``."""
    probe = "import importlib.util as u; raise SystemExit(u.find_spec('airflow') is None)"
    return subprocess.run([sys.executable, "-c", probe], cwd="/", timeout=60).returncode == 0


@pytest.mark.skipif(has_airflow(), reason="this environment has Airflow")
def test_airflow_conn_without_airflow_says_what_to_install(leasectl: Leasectl) -> None:
    result = leasectl("--airflow-conn", "lease_ops", "list")
    assert result.code == exits.USAGE
    assert "'lease_ops' needs Airflow installed" in result.err


def test_airflow_conn_reads_the_connection_the_tasks_use(tmp_path: Path, key: str) -> None:
    if not AIRFLOW_LEASECTL.exists():
        message = f"{AIRFLOW_LEASECTL} is missing (./run setup builds it)"
        if os.environ.get("LEASE_TEST_REQUIRE_ALL") == "1":
            pytest.fail(message)
        pytest.skip(message)
    db = tmp_path / "airflow-leases.db"
    store = connect(f"sqlite://{db}")
    holder = "w:1:0000000000000001"
    assert store.acquire(key, holder, holder, 300, {"dag_id": "billing"}).granted
    store.close()
    env = {k: v for k, v in os.environ.items() if k != "LEASE_STORE_URL"}
    env.update({"AIRFLOW_HOME": str(tmp_path / "airflow"),
                "AIRFLOW_CONN_LEASE_OPS": f"sqlite:///{db}"})

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(AIRFLOW_LEASECTL), *args], capture_output=True, text=True,
                              env=env, timeout=300, stdin=subprocess.DEVNULL)

    found = run("--airflow-conn", "lease_ops", "show", key, "--json")
    assert found.returncode == 0, found.stderr
    assert found.stdout and '"dag_id": "billing"' in found.stdout
    missing = run("--airflow-conn", "no_such_conn", "list")
    assert missing.returncode == exits.USAGE
    assert "'no_such_conn'" in missing.stderr
    # The console names its own flag, not the operator's parameter.
    assert "--airflow-conn 'no_such_conn': no such Airflow connection" in missing.stderr
    assert "lease_conn_id" not in missing.stderr


def test_in_an_airflow_environment_leasectl_says_which_store_it_reads(
        leasectl: Leasectl, tmp_path: Path) -> None:
    """With ``$AIRFLOW_HOME`` set and no store given, ``leasectl list`` read
    the embedded file while the tasks used their Redis Connection, and said
    nothing (issue 40): now every such run names its store and the flag that
    reads the tasks' one. Nothing is said when a store is given."""
    home = tmp_path / "airflow"
    (home / "lease_integrations").mkdir(parents=True)
    with connect(f"sqlite://{home}/lease_integrations/leases.db") as store:
        store.list()  # makes the embedded file
    result = leasectl("list", env={"AIRFLOW_HOME": str(home)})
    assert result.code == 0, result
    assert f"reading sqlite://{home}/lease_integrations/leases.db (the embedded default)" \
        in result.err, result.err
    assert "--airflow-conn lease_default" in result.err
    given = leasectl("--url", f"sqlite://{home}/lease_integrations/leases.db", "list",
                     env={"AIRFLOW_HOME": str(home)})
    assert given.code == 0 and given.err == "", given

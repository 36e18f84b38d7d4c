"""``leasectl --airflow-conn`` run from the Airflow environment as an operator
runs it: the Connection made with ``airflow connections add`` (kept in the
metadata database), one kept by a secrets backend, and an id that names nothing.

Before, leasectl asked the Task SDK, which outside a task reads only
``AIRFLOW_CONN_*``: a Connection in the metadata database looked undefined,
and for ``lease_default`` leasectl quietly listed the default store under
AIRFLOW_HOME ("0 held") instead of the one the tasks use."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from harness import AIRFLOW_2, WAIT

from lease_integrations import connect

BIN = Path(sys.executable).parent
HOLDER = "worker:1:0000000000000001"


def hold(url: str, key: str) -> None:
    with connect(url) as store:
        assert store.acquire(key, HOLDER, HOLDER, 600, {"dag_id": "billing"}).granted


def start(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([str(BIN / "leasectl"), *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)


def finish(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=WAIT)
    return process.returncode, out, err


def listed_keys(out: str) -> list[str]:
    return [row["key"] for row in json.loads(out)["leases"]]


def test_leasectl_finds_the_connection_wherever_airflow_keeps_it(
        airflow_home: Path, tmp_path: Path, key: str) -> None:
    # An AIRFLOW_HOME of its own (a copy of the session's migrated metadata DB),
    # so the lease_default added here never reaches another test's tasks.
    home = tmp_path / "airflow"
    home.mkdir()
    shutil.copy(airflow_home / "airflow.db", home / "airflow.db")
    env = {k: v for k, v in os.environ.items()
           if k != "LEASE_STORE_URL" and not k.startswith("AIRFLOW_CONN_")}
    env.update(AIRFLOW_HOME=str(home),
               AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home}/airflow.db")
    shared, decoy = tmp_path / "shared" / "leases.db", home / "lease_integrations" / "leases.db"
    for path in (shared, decoy):
        path.parent.mkdir(parents=True)
    hold(f"sqlite://{shared}", key)
    hold(f"sqlite://{decoy}", f"{key}-default-store")  # what a silent fallback shows
    connections = tmp_path / "connections.json"
    connections.write_text(json.dumps({"lease_vault": f"sqlite:///{shared}"}))

    # Airflow 2.11's CLI fails on a SQLite --conn-uri (UnboundLocalError in its
    # metrics; docs/operating/index.md): the form's fields there.
    fields = (["--conn-type", "sqlite", "--conn-host", str(shared)] if AIRFLOW_2
              else ["--conn-uri", f"sqlite:///{shared}"])
    added = subprocess.run(
        [str(BIN / "airflow"), "connections", "add", "lease_default", *fields], env=env,
        capture_output=True, text=True, timeout=WAIT, stdin=subprocess.DEVNULL)
    assert added.returncode == 0, added.stderr

    backend = {**env, "AIRFLOW__SECRETS__BACKEND":
               "airflow.secrets.local_filesystem.LocalFilesystemBackend",
               "AIRFLOW__SECRETS__BACKEND_KWARGS": json.dumps(
                   {"connections_file_path": str(connections)})}
    # The session's home, where no lease_default was ever defined.
    undefined = {**env, "AIRFLOW_HOME": str(airflow_home),
                 "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{airflow_home}/airflow.db"}
    runs = {  # independent: side by side (each pays Airflow's import)
        "metadata db": start(env, "--airflow-conn", "lease_default", "--json", "list"),
        "secrets backend": start(backend, "--airflow-conn", "lease_vault", "--json", "list"),
        "default undefined": start(undefined, "--airflow-conn", "lease_default", "list"),
    }
    results = {name: finish(process) for name, process in runs.items()}

    for name in ("metadata db", "secrets backend"):
        code, out, err = results[name]
        assert code == 0, f"{name}: {err}"
        assert listed_keys(out) == [key], name
    code, out, err = results["default undefined"]
    assert (code, out) == (2, "")  # an error naming the id, never another store's leases
    assert "--airflow-conn 'lease_default': no such Airflow connection (the tasks then use " \
           "$LEASE_STORE_URL or the embedded store" in err
    assert "looked in EnvironmentVariablesBackend, MetastoreBackend" in err

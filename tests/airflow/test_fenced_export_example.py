"""The fenced export example DAG (example_dags/fenced_export.py) runs as
written through ``dag.test()``, against moto's S3 server: its output is
published for the token its lease was granted, and an older token is
refused afterwards."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lease_integrations import StaleToken, connect
from lease_integrations.core.fencing import ObjectFence

# The Airflow 2.11 environment is installed as 2.11's users install it, with its
# own Flask 2; moto's S3 server needs Flask 3: this runs on the newest Airflow.
pytest.importorskip("moto.server", reason="moto's S3 server is not in this Airflow env (2.11)")

EXAMPLE = Path(__file__).resolve().parents[2] / "example_dags" / "fenced_export.py"
RUN = ("import runpy, sys; dag = runpy.run_path(sys.argv[1])['dag']; run = dag.test(); "
       "print('STATE', getattr(run.state, 'value', run.state))")


def test_the_fenced_export_dag_publishes_its_files_for_its_token(
    airflow_home: Path, s3_url: str, tmp_path: Path
) -> None:
    leases = f"sqlite://{tmp_path}/leases.db"
    dags = tmp_path / "dags"  # dag.test() runs a DAG of the DAG folder (it serializes that)
    dags.mkdir()
    shutil.copy(EXAMPLE, dags / EXAMPLE.name)
    env = {**os.environ, "EXPORT_URL": s3_url, "LEASE_STORE_URL": leases,
           "AIRFLOW__CORE__DAGS_FOLDER": str(dags)}
    done = subprocess.run([sys.executable, "-c", RUN, str(dags / EXAMPLE.name)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert "STATE success" in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]
    with connect(leases) as store:
        record = store.get("exports/billing")
    assert record is not None and not record.held
    output = ObjectFence(s3_url).read()
    assert output is not None and output.token == record.token
    assert output.files["_SUCCESS"] == f"token {record.token}\n".encode()
    assert output.files["billing.csv"].startswith(b"customer,amount,day\nacme,120,")
    with pytest.raises(StaleToken):
        ObjectFence(s3_url).commit(record.token - 1, {"billing.csv": b"stale"})

"""The docs' recipe for watching two overlapping runs (issue 40: the
examples ended in milliseconds, so a newcomer could see neither the skip nor
the wait), run as written with Airflow's own CLI: ``airflow dags test
warehouse_weekly_rebuild -c '{"hold_seconds": N}'`` holds ``warehouse/main``
while ``airflow dags test warehouse_hourly_load`` skips. A fresh
AIRFLOW_HOME with the example copied in, the lease in its embedded store."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from harness import WAIT, wait_until

from lease_integrations import connect

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
KEY = "warehouse/main"


def test_a_held_rebuild_makes_the_hourly_load_skip() -> None:
    home = Path(tempfile.mkdtemp(prefix="lease-example-overlap-"))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("AIRFLOW") and k != "LEASE_STORE_URL"}
    env.update({"AIRFLOW_HOME": str(home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
                "AIRFLOW__LEASE_INTEGRATIONS__RUN_SECRET_KEY":
                    os.environ.get("AIRFLOW__LEASE_INTEGRATIONS__RUN_SECRET_KEY", "x" * 43)})

    def airflow(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(BIN / "airflow"), *args], env=env, capture_output=True,
                              text=True, timeout=WAIT, cwd=str(home))

    holder = None
    try:
        assert airflow("db", "migrate").returncode == 0
        (home / "dags").mkdir()
        shutil.copy(ROOT / "example_dags" / "shared_warehouse_key.py", home / "dags")
        assert airflow("dags", "reserialize").returncode == 0  # the docs: once, before two runs
        with open(home / "holder.out", "wb") as out:
            holder = subprocess.Popen(
                [str(BIN / "airflow"), "dags", "test", "warehouse_weekly_rebuild", "-c",
                 '{"hold_seconds": 600}'], env=env, stdout=out, stderr=subprocess.STDOUT,
                cwd=str(home), start_new_session=True)
        store_file = home / "lease_integrations" / "leases.db"

        def held() -> bool:
            assert holder is not None
            if holder.poll() is not None:
                raise AssertionError((home / "holder.out").read_text()[-3000:])
            if not store_file.exists():
                return False
            with connect(f"sqlite://{store_file}") as store:
                record = store.get(KEY)
            return record is not None and record.holder is not None

        wait_until(held, "the rebuild to hold warehouse/main")
        load = airflow("dags", "test", "warehouse_hourly_load")
        assert load.returncode == 0, (load.stdout + load.stderr)[-3000:]
        assert "skipping" in load.stdout + load.stderr, (load.stdout + load.stderr)[-3000:]
        with connect(f"sqlite://{store_file}") as store:
            grants = [e for e in store.history(KEY) if e.kind == "acquired"]
        assert len(grants) == 1, grants  # only the rebuild's: the load never held the key
    finally:
        if holder is not None and holder.poll() is None:
            os.killpg(holder.pid, 15)  # SIGTERM: the task gives its lease back
            try:
                holder.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(holder.pid, 9)
                holder.wait(30)
        shutil.rmtree(home, ignore_errors=True)

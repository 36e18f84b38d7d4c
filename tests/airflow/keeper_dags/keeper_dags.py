"""A DAG for the keeper's busy-holder test (issue 31): a ``LeasedPythonOperator``
whose callable spends 2.5 ttl in one call that keeps the GIL
(``ctypes.PyDLL(None).sleep``), so the task's interpreter never runs while
the lease must be renewed. In ``$KEEPER_RECORD_DIR`` it writes ``pid`` (the
task's process), waits for the file ``go`` (the test makes it once the
keeper has the lease), and writes ``call-start`` and ``call-end`` (the
monotonic times)."""

from __future__ import annotations

import ctypes
import os
import time
from datetime import datetime
from pathlib import Path
from typing import Any

try:  # Airflow 3
    from airflow.sdk import DAG
except ImportError:  # Airflow 2.11
    from airflow import DAG

from lease_integrations.airflow import LeasedPythonOperator

RECORD = Path(os.environ.get("KEEPER_RECORD_DIR", "/tmp/keeper-records"))
TTL, CALL = 2.0, 5


def busy(**context: Any) -> int:
    RECORD.mkdir(parents=True, exist_ok=True)
    (RECORD / "pid").write_text(str(os.getpid()))
    deadline = time.monotonic() + 120
    while not (RECORD / "go").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    (RECORD / "call-start").write_text(f"{time.monotonic():.6f}")
    ctypes.PyDLL(None).sleep(CALL)
    (RECORD / "call-end").write_text(f"{time.monotonic():.6f}")
    token: int = context["lease"].token
    return token


with DAG(dag_id="lk_busy", schedule=None, start_date=datetime(2026, 1, 1),
         default_args={"retries": 0}) as lk_busy:
    LeasedPythonOperator(task_id="job", python_callable=busy, lease_ttl=TTL)

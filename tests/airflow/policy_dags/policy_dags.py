"""DAGs for the real-scheduler policy test: one leased task per on_busy
policy (skip, wait, deferrable wait) and one whose first try is SIGKILLed.
Self-contained (the scheduler parses only this file); callables record JSON
lines in ``$LEASE_TEST_RECORD_DIR``."""

from __future__ import annotations

import json
import os
import signal
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

try:  # Airflow 3
    from airflow.sdk import DAG
except ImportError:  # Airflow 2.11
    from airflow import DAG

from lease_integrations.airflow import LeasedPythonOperator

RECORD_DIR = os.environ.get("LEASE_TEST_RECORD_DIR", "/nonexistent")
START = datetime(2026, 1, 1, tzinfo=timezone.utc)


def record(event: str, context: dict[str, Any]) -> None:
    ti, lease = context["ti"], context["lease"]
    line = {"event": event, "dag_id": ti.dag_id, "run_id": ti.run_id,
            "try_number": ti.try_number, "t": time.monotonic(), "token": lease.token,
            "holder": lease.holder}
    with open(Path(RECORD_DIR) / "events.jsonl", "a") as f:
        f.write(json.dumps(line) + "\n")


def work(**context: Any) -> None:
    record("start", context)
    time.sleep(2.0)  # the work itself, long enough for the runs to meet
    record("end", context)


def die_the_first_time(**context: Any) -> None:
    """SIGKILLs itself the first time it runs in a DAG run (a crash: the lease
    is left to its ttl). The first *execution*, not try 1: on a loaded machine
    a try can fail before the callable starts, and the retry must still meet
    a crashed holder."""
    record("start", context)
    marker = Path(RECORD_DIR) / f"crashed-{context['ti'].run_id}".replace(":", "_")
    if not marker.exists():
        marker.touch()
        os.kill(os.getpid(), signal.SIGKILL)
    record("end", context)


def policy_dag(dag_id: str, **lease: Any) -> DAG:
    with DAG(dag_id, start_date=START, schedule=timedelta(days=1), catchup=False,
             max_active_runs=5) as dag:
        # One retry covers Airflow's own start-up hiccups on a loaded machine;
        # the test still sees every start of the callable and every state mismatch.
        LeasedPythonOperator(task_id="job", python_callable=work, lease_ttl=10, retries=1,
                             retry_delay=timedelta(seconds=1), **lease)
    return dag


lt_pol_skip = policy_dag("lt_pol_skip", on_busy="skip")
lt_pol_wait = policy_dag("lt_pol_wait", on_busy="wait", wait_timeout=300)
lt_pol_defer = policy_dag("lt_pol_defer", on_busy="wait", wait_timeout=300, deferrable=True,
                          poll_interval=0.5)

with DAG("lt_pol_retry", start_date=START, schedule=None, catchup=False) as lt_pol_retry:
    LeasedPythonOperator(task_id="job", python_callable=die_the_first_time, lease_ttl=30,
                         on_busy="skip", retries=3, retry_delay=timedelta(seconds=1))

"""Two DAGs that must never write the warehouse at the same time.

Pools and ``max_active_tis_per_dag`` stop at one task id and one metadata
DB; a lease key is just a name, so any tasks that use the same key (in any
DAG, even in another Airflow install sharing the store) exclude each other.
The hourly load skips an hour while the weekly rebuild holds the key; the
rebuild waits for a running load to finish.

Run it: copy this file into your DAGs folder (``$AIRFLOW_HOME/dags``), then
``airflow dags test warehouse_hourly_load`` runs it once without a scheduler (and
``airflow dags test warehouse_weekly_rebuild`` for the other DAG).

To watch the exclusion, make one run hold the key for a while: the DAG
parameter ``hold_seconds`` (default 0) keeps the task inside its lease that
long, checking it every second. Start ``airflow dags test
warehouse_weekly_rebuild -c '{"hold_seconds": 60}'``, and while it holds,
``airflow dags test warehouse_hourly_load`` skips (``leasectl --airflow-conn
lease_default list``, or the Leases page, shows the holder). See "Watching
two overlapping runs" in docs/airflow/index.md.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any

try:  # Airflow 3
    from airflow.sdk import DAG, task
except ImportError:  # Airflow 2.11
    from airflow import DAG
    from airflow.decorators import task

WAREHOUSE_KEY = "warehouse/main"
START = datetime(2026, 1, 1, tzinfo=timezone.utc)
#: ``-c '{"hold_seconds": 60}'`` (or the trigger form) keeps a run in its lease a minute.
PARAMS = {"hold_seconds": 0}


def hold(context: dict[str, Any]) -> None:
    """Stay inside the lease ``hold_seconds`` (a DAG parameter), checking it
    every second as long work should: a lost lease raises ``LeaseLost`` here."""
    lease = context["lease"]
    deadline = time.monotonic() + max(0.0, float(context["params"].get("hold_seconds") or 0))
    while (left := deadline - time.monotonic()) > 0:
        lease.check()
        time.sleep(min(1.0, left))

with DAG("warehouse_hourly_load", schedule="@hourly", start_date=START, catchup=False,
         params=PARAMS, tags=["lease_integrations", "example"]):

    @task.leased(lease_key=WAREHOUSE_KEY, lease_ttl=60, on_busy="skip")
    def load_increment(**context: Any) -> None:
        print(f"loading {context['ds']} with fencing token {context['lease'].token}")
        hold(context)

    load_increment()

with DAG("warehouse_weekly_rebuild", schedule="@weekly", start_date=START, catchup=False,
         params=PARAMS, tags=["lease_integrations", "example"]):

    @task.leased(lease_key=WAREHOUSE_KEY, lease_ttl=300, on_busy="wait", wait_timeout=3600)
    def rebuild(**context: Any) -> None:
        print(f"rebuilding with fencing token {context['lease'].token}")
        hold(context)

    rebuild()

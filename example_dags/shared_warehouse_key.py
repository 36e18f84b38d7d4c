"""Two DAGs that must never write the warehouse at the same time.

Pools and ``max_active_tis_per_dag`` stop at one task id and one metadata
DB; a lease key is just a name, so any tasks that use the same key (in any
DAG, even in another Airflow install sharing the store) exclude each other.
The hourly load skips an hour while the weekly rebuild holds the key; the
rebuild waits for a running load to finish.

Run it: copy this file into your DAGs folder (``$AIRFLOW_HOME/dags``), then
``airflow dags test warehouse_hourly_load`` runs it once without a scheduler (and
``airflow dags test warehouse_weekly_rebuild`` for the other DAG).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

try:  # Airflow 3
    from airflow.sdk import DAG, task
except ImportError:  # Airflow 2.11
    from airflow import DAG
    from airflow.decorators import task

WAREHOUSE_KEY = "warehouse/main"
START = datetime(2026, 1, 1, tzinfo=timezone.utc)

with DAG("warehouse_hourly_load", schedule="@hourly", start_date=START, catchup=False,
         tags=["lease_integrations", "example"]):

    @task.leased(lease_key=WAREHOUSE_KEY, lease_ttl=60, on_busy="skip")
    def load_increment(**context: Any) -> None:
        print(f"loading {context['ds']} with fencing token {context['lease'].token}")

    load_increment()

with DAG("warehouse_weekly_rebuild", schedule="@weekly", start_date=START, catchup=False,
         tags=["lease_integrations", "example"]):

    @task.leased(lease_key=WAREHOUSE_KEY, lease_ttl=300, on_busy="wait", wait_timeout=3600)
    def rebuild(**context: Any) -> None:
        print(f"rebuilding with fencing token {context['lease'].token}")

    rebuild()

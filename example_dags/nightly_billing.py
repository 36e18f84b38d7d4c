"""A nightly job that must never run twice at once.

``max_active_runs=1`` does not stop this: a backfill gets its own limit, and a
manual trigger during the nightly run is a second run of the same DAG. The
lease's default key (``airflow/nightly_billing/charge_customers``) is shared
by every run of the task, whatever its run type, so whichever run comes second
waits, without holding a worker slot (``deferrable=True``: the triggerer
watches the lease), for up to six hours, then fails.

The store: the Airflow Connection ``lease_default`` (redis, postgres, mongo or
sqlite) if it exists, else the SQLite file under ``$AIRFLOW_HOME`` (enough
for a single-host install; use a networked store across hosts).

Run it: copy this file into your DAGs folder (``$AIRFLOW_HOME/dags``), then
``airflow dags test nightly_billing`` runs it once without a scheduler (no
triggerer runs there, so the deferred parts behave as in production only under
``airflow standalone`` or a scheduler with a triggerer).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

try:  # Airflow 3
    from airflow.sdk import DAG, task
except ImportError:  # Airflow 2.11
    from airflow import DAG
    from airflow.decorators import task

with DAG(
    "nightly_billing",
    schedule="0 2 * * *",
    start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
    catchup=False,
    tags=["lease_integrations", "example"],
):

    @task.leased(lease_ttl=120, on_busy="wait", deferrable=True, wait_timeout=6 * 3600)
    def charge_customers(**context: Any) -> int:
        lease = context["lease"]
        print(f"charging for {context['ds']} under lease {lease.key} with token {lease.token}")
        # ... the real work; long steps can call lease.check() between batches ...
        return int(lease.token)

    charge_customers()

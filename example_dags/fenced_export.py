"""A nightly export to S3 that a late, paused former holder cannot overwrite.

The export is a set of files. A worker paused past its TTL (a long GC, a
frozen VM) wakes up believing it still holds the lease, while a newer run
already wrote today's files: without a fence its late upload would replace
them, or half of them. ``ObjectFence`` publishes the files for the lease's
token all or nothing, and refuses a token older than the one that last
committed (``StaleToken``: the task fails, the newer output stays whole).
Readers follow the manifest: ``ObjectFence(EXPORT_URL).read()``.

Run it: ``pip install -e '<checkout>[airflow,s3]'``, set ``EXPORT_URL``
(``s3://your-bucket/exports/billing``; credentials and endpoint the way
boto3 takes them), copy this file into your DAGs folder, then
``airflow dags test fenced_export``.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from typing import Any

try:  # Airflow 3
    from airflow.sdk import DAG
except ImportError:  # Airflow 2.11
    from airflow import DAG

from lease_integrations.airflow import LeasedPythonOperator
from lease_integrations.core.fencing import ObjectFence

EXPORT_URL = os.environ.get("EXPORT_URL", "s3://my-bucket/exports/billing")


def export_billing(**context: Any) -> int:
    token = int(context["lease"].token)
    day = str(context["ds"])
    rows = "customer,amount,day\n" + "".join(f"{c},{a},{day}\n" for c, a in (("acme", 120),
                                                                             ("globex", 80)))
    ObjectFence(EXPORT_URL).commit(token, {"billing.csv": rows.encode(),
                                           "_SUCCESS": f"token {token}\n".encode()})
    return token


with DAG(
    "fenced_export",
    schedule="@daily",
    start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
    catchup=False,
    tags=["lease_integrations", "example"],
) as dag:
    LeasedPythonOperator(
        task_id="export_billing",
        python_callable=export_billing,
        lease_key="exports/billing",
        lease_ttl=60,
        on_busy="fail",
    )

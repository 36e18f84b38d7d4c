"""A search-index rebuild protected as one unit: extract -> build -> swap.

Each step alone is harmless twice; interleaved, they are not: if a backfill's
``build`` runs between the nightly run's ``build`` and ``swap``, the nightly
run swaps in an index built from the backfill's extract. One DAG-run lease
spans the three tasks, so a second run (backfill, manual, or another DAG
sharing the key) skips while the first holds it. Between tasks the lease is
renewed from the triggerer, so a run waiting in a queue keeps it without a
worker slot.

The swap writes through the SQL fencing guard with the run's token: should a
run be cut off (its lease broken or expired) and a newer run take over, a
late swap by the old run is refused (``StaleToken``) instead of replacing the
newer index.

Store: the ``lease_default`` connection, or ``$LEASE_STORE_URL``, or the
embedded SQLite file under ``$AIRFLOW_HOME``.

Run it: copy this file into your DAGs folder (``$AIRFLOW_HOME/dags``), then
``airflow dags test index_rebuild_dag_run_lease`` runs it once without a scheduler (no
triggerer runs there, so the deferred parts behave as in production only under
``airflow standalone`` or a scheduler with a triggerer).
"""

# ruff: noqa: SIM117  (the lease block reads best nested inside the DAG block)
from __future__ import annotations

import json
import os
import sqlite3
from datetime import datetime
from pathlib import Path
from typing import Any

try:  # Airflow 3
    from airflow.sdk import DAG, task
except ImportError:  # Airflow 2.11
    from airflow import DAG
    from airflow.decorators import task

from lease_integrations import SqlFence
from lease_integrations.airflow.dag_run_lease import dag_run_lease

WORK_DIR = Path(os.environ.get("INDEX_REBUILD_DIR", "/tmp/index_rebuild"))
FENCE = SqlFence("index_fences")


@task
def extract(**context: Any) -> str:
    WORK_DIR.mkdir(parents=True, exist_ok=True)
    staged = WORK_DIR / f"extract-{context['lease'].token}.json"
    staged.write_text(json.dumps([{"id": i, "title": f"doc {i}"} for i in range(100)]))
    return str(staged)


@task
def build(staged: str, **context: Any) -> str:
    docs = json.loads(Path(staged).read_text())
    index = {doc["title"].split()[-1]: doc["id"] for doc in docs}
    built = WORK_DIR / f"index-{context['lease'].token}.json"
    built.write_text(json.dumps(index))
    return str(built)


@task
def swap(built: str, **context: Any) -> None:
    lease = context["lease"]
    lease.check()  # cheap: raises LeaseLost if the run's lease is already gone
    with sqlite3.connect(WORK_DIR / "catalog.db", isolation_level=None) as conn:
        conn.execute("BEGIN IMMEDIATE")
        FENCE.create_table(conn)
        conn.execute("CREATE TABLE IF NOT EXISTS live (name TEXT PRIMARY KEY, path TEXT)")
        FENCE.check(conn, "search-index", lease.token)  # StaleToken for a cut-off run
        conn.execute("INSERT OR REPLACE INTO live VALUES ('search-index', ?)", (built,))
        conn.execute("COMMIT")


with DAG(
    dag_id="index_rebuild_dag_run_lease",
    schedule="@daily",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["lease_integrations", "example"],
) as dag:
    with dag_run_lease(lease_key="search-index", lease_ttl=120, on_busy="skip"):
        swap(build(extract()))

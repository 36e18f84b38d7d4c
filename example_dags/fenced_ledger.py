"""Writes that a late, paused former holder cannot corrupt.

A lease alone cannot guarantee exclusion: a worker paused past its TTL (a
long GC, a frozen VM) wakes up believing it still holds the lease, while a
newer run already holds it. The fencing token closes the gap: every write
checks the token in the same transaction, and the database rejects a token
older than one it has already accepted (``StaleToken``), rolling the write back.

Run it: copy this file into your DAGs folder (``$AIRFLOW_HOME/dags``), then
``airflow dags test fenced_ledger`` runs it once without a scheduler.
"""

from __future__ import annotations

import os
import sqlite3
from datetime import datetime, timezone
from typing import Any

try:  # Airflow 3
    from airflow.sdk import DAG
except ImportError:  # Airflow 2.11
    from airflow import DAG

from lease_integrations import SqlFence
from lease_integrations.airflow import LeasedPythonOperator

LEDGER = os.path.join(os.environ.get("AIRFLOW_HOME", "."), "example_ledger.db")
fence = SqlFence("ledger_fences")


def post_ledger_entries(**context: Any) -> int:
    token = context["lease"].token
    conn = sqlite3.connect(LEDGER, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        fence.create_table(conn)
        conn.execute("CREATE TABLE IF NOT EXISTS ledger (day TEXT, amount INTEGER, token INTEGER)")
        fence.check(conn, "ledger", token)  # raises StaleToken for a superseded holder
        conn.execute("INSERT INTO ledger VALUES (?, ?, ?)", (context["ds"], 100, token))
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    finally:
        conn.close()
    return int(token)


with DAG(
    "fenced_ledger",
    schedule="@daily",
    start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
    catchup=False,
    tags=["lease_integrations", "example"],
):
    LeasedPythonOperator(
        task_id="post_ledger_entries",
        python_callable=post_ledger_entries,
        lease_key="ledger/{{ dag.dag_id }}",
        lease_ttl=60,
        on_busy="fail",
        retries=2,
    )

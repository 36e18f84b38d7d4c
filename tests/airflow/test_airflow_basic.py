"""One leased task at a time through ``dag.test()``: the context, XCom, the
holder's meta, the decorator, release on success and failure, and the
embedded default store under $AIRFLOW_HOME."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from harness import events, result_for

from lease_integrations import connect


def test_leased_task_runs_with_lease_in_context_xcom_and_meta(run_dags: Any, record_dir: Path,
                                                              monkeypatch: Any) -> None:
    # No LEASE_STORE_URL and no lease_default connection: the embedded store under AIRFLOW_HOME.
    monkeypatch.delenv("LEASE_STORE_URL")
    results = run_dags("lt_basic", "lt_fail", name="basic").wait()

    basic = result_for(results, "lt_basic")
    assert basic["state"] == "success", basic
    starts = {e["task_id"]: e for e in events(record_dir) if e["event"] == "start"}
    first, second = starts["first"], starts["second"]

    assert first["key"] == "airflow/lt_basic/first"  # the default key: never the run id
    assert second["key"] == "basic-lt_basic-templated"  # lease_key is templated
    assert second["upstream_token"] == first["token"]  # the token went to XCom
    meta = first["meta"]
    assert meta["dag_id"] == "lt_basic" and meta["task_id"] == "first"
    assert meta["run_id"] == basic["run_id"]
    assert meta["run_type"] == "manual"
    assert meta["try_number"] == 1 and meta["map_index"] == -1
    assert meta["host"]

    store = connect(f"sqlite://{os.environ['AIRFLOW_HOME']}/lease_integrations/leases.db")
    record = store.get("airflow/lt_basic/first")
    assert record is not None and record.token == first["token"]
    assert not record.held  # released on success

    failed = result_for(results, "lt_fail")
    assert failed["tasks"]["job"] == "failed"
    failed_record = store.get("airflow/lt_fail/job")
    assert failed_record is not None and failed_record.token >= 1
    assert not failed_record.held  # released on failure too
    store.close()

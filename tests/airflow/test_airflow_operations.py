"""Airflow under production settings, through ``dag.test()``: the embedded
per-host store refused under executors that spread tries over hosts, and a
mapped task keyed on its mapped argument."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from harness import events, open_gate, result_for

REFUSAL = "no lease store is configured"
WAIT = 400.0  # three dag.test() runs on a loaded machine


def test_per_host_default_is_refused_under_remote_executors(run_dags: Any, record_dir: Path,
                                                            monkeypatch: Any) -> None:
    """No Connection, no LEASE_STORE_URL: Celery and a Local+Kubernetes hybrid
    refuse before the callable starts; an explicit SQLite URL is respected.
    One process runs the three cases in turn (Airflow's start-up is paid once)."""
    explicit = os.environ["LEASE_STORE_URL"]
    monkeypatch.delenv("LEASE_STORE_URL")
    proc = run_dags("env:AIRFLOW__CORE__EXECUTOR=CeleryExecutor", "lt_refuse",
                    "env:AIRFLOW__CORE__EXECUTOR=LocalExecutor,KubernetesExecutor", "lt_refuse",
                    "env:AIRFLOW__CORE__EXECUTOR=CeleryExecutor", f"env:LEASE_STORE_URL={explicit}",
                    "lt_refuse", name="refuse")
    results = proc.wait(WAIT)
    assert [r["tasks"]["job"] for r in results] == ["failed", "failed", "success"], proc.tail()
    out = proc.output()
    for executor in ("CeleryExecutor", "KubernetesExecutor"):
        assert f"ConfigurationError: {REFUSAL} (no Airflow connection 'lease_default', no " \
               f"$LEASE_STORE_URL), and the executor {executor} " in out
    for how in ("AIRFLOW_CONN_LEASE_DEFAULT=", "LEASE_STORE_URL=", "lease_conn_id="):
        assert how in out
    starts = [e for e in events(record_dir) if e["event"] == "start"]
    assert len(starts) == 1  # only the run with a chosen store ran its callable


def test_mapped_task_keyed_on_its_argument_never_runs_one_tenant_twice_at_once(
        run_dags: Any, record_dir: Path) -> None:
    """Two runs map over the same tenants in opposite orders; with
    ``lease_key="tenant-{{ tenant }}"`` a tenant is processed by one run at a
    time, whichever map index it has in each run."""
    fwd = run_dags("lt_warm", "gate:go", "lt_mapped_fwd", name="fwd")
    rev = run_dags("lt_warm", "gate:go", "lt_mapped_rev", name="rev")
    fwd.wait_for_text("RESULT", WAIT)  # both have paid Airflow's start-up
    rev.wait_for_text("RESULT", WAIT)
    open_gate(record_dir, "go")
    assert result_for(fwd.wait(WAIT), "lt_mapped_fwd")["state"] == "success", fwd.tail()
    assert result_for(rev.wait(WAIT), "lt_mapped_rev")["state"] == "success", rev.tail()

    log = [e for e in events(record_dir) if e.get("tenant")]
    by_tenant: dict[str, list[dict[str, Any]]] = {}
    for event in log:
        by_tenant.setdefault(event["tenant"], []).append(event)
    assert sorted(by_tenant) == ["t1", "t2", "t3"]
    for tenant, tenant_events in by_tenant.items():
        starts = [e for e in tenant_events if e["event"] == "start"]
        assert {e["dag_id"] for e in starts} == {"lt_mapped_fwd", "lt_mapped_rev"}
        assert all(e["key"] == f"tenant-{tenant}" for e in starts)
        holder = None
        for event in sorted(tenant_events, key=lambda e: e["t"]):
            if event["event"] == "start":
                assert holder is None, f"{tenant}: {event['dag_id']} started while {holder} ran"
                holder = event["dag_id"]
            else:
                assert holder == event["dag_id"]
                holder = None
        tokens = [e["token"] for e in sorted(starts, key=lambda e: e["t"])]
        assert tokens == sorted(tokens) and len(set(tokens)) == 2

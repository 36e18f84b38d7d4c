"""Overlapping runs in separate processes: two runs of one DAG (different
logical dates, as a backfill and a manual run have) and DAGs sharing one key.
Exactly one holds the lease at a time; the others skip, fail or wait (also
deferred, through the trigger) as configured, and their logs name the holder."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from harness import events, open_gate, result_for, wait_until

from lease_integrations import connect

SHARED_KEY = "airflow/lt_hold/job"


def test_overlapping_runs_skip_fail_wait_and_defer(run_dags: Any, record_dir: Path) -> None:
    # All three processes start at once; the contenders pay Airflow's start-up
    # (lt_warm) and then wait for their cue (a gate file).
    holder = run_dags("lt_hold@2026-01-01T00:00:00+00:00", name="holder")
    contender = run_dags("lt_warm", "gate:contend", "lt_hold@2026-01-02T00:00:00+00:00",
                         "lt_busy_fail", "lt_wait", name="contender")
    deferred = run_dags("lt_warm", "gate:defer", "lt_defer", name="deferred")
    wait_until(lambda: any(e["event"] == "start" for e in events(record_dir)),
               "the first run to start its callable")
    held = connect(os.environ["LEASE_STORE_URL"]).get(SHARED_KEY)
    assert held is not None and held.held

    # While it holds: a second run of the same DAG (skip), a DAG sharing the key
    # (fail), and a waiting DAG that then holds it in turn; then a deferred waiter.
    open_gate(record_dir, "contend")
    contender.wait_for_text("waiting up to")
    open_gate(record_dir, "defer")
    deferred.wait_for_text("deferring until it is free")

    open_gate(record_dir, "go1")  # the first run finishes and releases
    assert result_for(holder.wait(), "lt_hold")["state"] == "success"
    wait_until(lambda: any(e["dag_id"] == "lt_wait" for e in events(record_dir)),
               "the waiting run to get the lease")
    open_gate(record_dir, "go2")  # the waiting run finishes; the deferred one resumes

    results = contender.wait()
    skipped = result_for(results, "lt_hold")
    assert skipped["tasks"]["job"] == "skipped", skipped
    assert result_for(results, "lt_busy_fail")["tasks"]["job"] == "failed"
    assert result_for(results, "lt_wait")["tasks"]["job"] == "success"
    assert result_for(deferred.wait(), "lt_defer")["tasks"]["job"] == "success"

    # The busy runs' logs name the holder: its holder id and its DAG run.
    out = contender.output()
    assert held.holder is not None and held.holder in out
    first_run_id = held.meta["run_id"]
    assert out.count(f"run_id={first_run_id}") >= 2  # once for skip, once for fail
    assert "skipping: lease 'airflow/lt_hold/job' is held by" in out
    assert "failing: lease 'airflow/lt_hold/job' is held by" in out

    # Exactly the three holders ran, one after another, with increasing tokens.
    log = events(record_dir)
    ran = [e for e in log if e["event"] == "start"]
    assert [e["dag_id"] for e in ran] == ["lt_hold", "lt_wait", "lt_defer"]
    assert [e["run_id"] for e in ran].count(first_run_id) == 1
    tokens = [e["token"] for e in ran]
    assert tokens == sorted(tokens) and len(set(tokens)) == 3
    assert_no_overlap(log)


def assert_no_overlap(log: list[dict[str, Any]]) -> None:
    """Each start is followed by its own end before the next start."""
    holder = None
    for event in sorted(log, key=lambda e: e["t"]):
        if event["event"] == "start":
            assert holder is None, f"{event} started while {holder} held the lease"
            holder = (event["dag_id"], event["run_id"])
        elif event["event"] == "end":
            assert holder == (event["dag_id"], event["run_id"]), event
            holder = None

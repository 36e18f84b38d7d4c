"""Faults through ``dag.test()``: the lease broken from outside while the
callable runs (``on_lost="check"``: the try fails; ``"exit"``, the default:
the process running the task ends with status 75), SIGTERM (release at once,
before the supervisor's SIGKILL) and SIGKILL (the TTL frees the lease; the
next run takes it, nobody clears it)."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from harness import AIRFLOW_2, events, open_gate, result_for, wait_until

from lease_integrations import LEASE_LOST_EXIT_STATUS, connect


def started(record_dir: Path, dag_id: str) -> list[dict[str, Any]]:
    return [e for e in events(record_dir) if e["event"] == "start" and e["dag_id"] == dag_id]


def task_states(airflow_home: Path, dag_id: str) -> set[str | None]:
    """Every state the metadata DB holds for ``dag_id``'s task instances."""
    with sqlite3.connect(airflow_home / "airflow.db") as db:
        return {state for (state,) in db.execute(
            "SELECT state FROM task_instance WHERE dag_id = ?", (dag_id,))}


def test_broken_lease_and_sigterm_end_the_try_failed(run_dags: Any, record_dir: Path,
                                                     airflow_home: Path) -> None:
    """One process (one Airflow start-up) runs three DAGs in turn: the lease of
    the first is broken from outside (``on_lost="check"``); the second gets
    SIGTERM, as the supervisor sends when a task is killed; the lease of the
    third is broken under the default ``on_lost="exit"``, which ends the
    process running ``dag.test()``, so it comes last.

    Airflow 2.11's ``dag.test()`` records the SIGTERMed try failed and then
    lets its handler's ``AirflowTaskTerminated`` (a BaseException) end the
    process: there the second DAG runs in a process of its own."""
    store = connect(os.environ["LEASE_STORE_URL"])
    if AIRFLOW_2:
        proc = run_dags("lt_loss_check", "lt_loss", name="faults")
        sigterm = run_dags("lt_sigterm", name="sigterm")
    else:
        proc = sigterm = run_dags("lt_loss_check", "lt_sigterm", "lt_loss", name="faults")
    wait_until(lambda: started(record_dir, "lt_loss_check"), "lt_loss_check to start")
    before = store.force_release("airflow/lt_loss_check/job", by="test operator")
    assert before is not None and before.held

    wait_until(lambda: started(record_dir, "lt_sigterm"), "lt_sigterm to start")
    assert store.get("airflow/lt_sigterm/job").held  # type: ignore[union-attr]
    sigterm.kill(signal.SIGTERM)
    # The ttl is 60 s: released well inside it means the handler released it.
    wait_until(lambda: not store.get("airflow/lt_sigterm/job").held,  # type: ignore[union-attr]
               "the lease to be released after SIGTERM", timeout=30)

    wait_until(lambda: started(record_dir, "lt_loss"), "lt_loss to start")
    before = store.force_release("airflow/lt_loss/job", by="test operator")
    assert before is not None and before.held

    results = proc.wait()
    assert proc.process.returncode == LEASE_LOST_EXIT_STATUS, proc.tail()
    assert result_for(results, "lt_loss_check")["tasks"]["job"] == "failed"  # check policy
    sigterm.wait()
    assert task_states(airflow_home, "lt_sigterm") == {"failed"}
    # exit policy: the process ended inside the try, which never became a success.
    assert not [r for r in results if r["dag_id"] == "lt_loss"]
    assert "success" not in task_states(airflow_home, "lt_loss")
    assert not [e for e in events(record_dir) if e["event"] in ("survived", "end")]
    out = proc.output()
    assert "LeaseLost" in out and re.search(r"lease 'airflow/lt_loss_check/job' \(token \d+\) "
                                           "was lost", out)
    assert re.search(r"SIGTERM: releasing lease airflow/lt_sigterm/job \(token \d+\)",
                     sigterm.output())
    assert (re.search(r"lease airflow/lt_loss/job \(token \d+\) lost: the store refused the "
                      "renewal", out)
            and "stopping this process and everything it started (exit status 75)" in out), (
        proc.tail())
    store.close()


@pytest.mark.parametrize("keeper", ["off", "on"])
def test_sigkilled_holder_is_replaced_without_clearing(run_dags: Any, record_dir: Path,
                                                        keeper: str) -> None:
    """SIGKILL of the run's process (the OOM killer) inside its leased
    callable. With its keeper, the keeper ends what the run started and gives
    the lease back at once; without one (``LEASE_KEEPER=off``: as when the
    whole machine died) nobody releases it and the store's clock expires it
    after its ttl. Either way nobody clears anything, and the next run takes
    over with a higher token."""
    store = connect(os.environ["LEASE_STORE_URL"])
    key = "airflow/lt_crash/job"
    crashed = run_dags("lt_crash", name="crashed",
                       env={"LEASE_KEEPER": "off"} if keeper == "off" else None)
    # The next run's process starts now too, and waits for its cue after start-up.
    following = run_dags("lt_warm", "gate:crash-go", "lt_crash", name="next")
    wait_until(lambda: started(record_dir, "lt_crash"), "the callable to start")
    token = started(record_dir, "lt_crash")[0]["token"]
    crashed.kill(signal.SIGKILL)
    crashed.wait()
    if keeper == "off":
        dead = store.get(key)
        assert dead is not None and dead.holder is not None  # nobody released it
        assert dead.token == token
    wait_until(lambda: not store.get(key).held, "the dead holder's lease to end")  # type: ignore[union-attr]
    ends = [e.kind for e in store.history(key) if e.token == token and e.kind != "acquired"]
    assert ("released" in ends) == (keeper == "on"), ends
    open_gate(record_dir, "crash-go")
    results = following.wait()
    assert result_for(results, "lt_crash")["tasks"]["job"] == "success"
    runs = started(record_dir, "lt_crash")
    assert len(runs) == 2 and runs[0]["token"] == token < runs[1]["token"]
    assert runs[0]["run_id"] != runs[1]["run_id"]
    store.close()

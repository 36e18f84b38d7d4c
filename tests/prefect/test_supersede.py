"""``@leased_flow(on_busy="supersede")``: a flow run replaces the run holding
its lease. The holder is a flow run in its own process writing fenced rows
(``flows_for_tests.fenced_rows``); the superseding run breaks its lease, the
keeper's fail-stop ends its process, its run is reported Cancelled naming the
new run, and only then does the new run's body start, with a higher token.
A guard (``supersede_if``) that refuses leaves the holder running and fails
the new run."""

from __future__ import annotations

import json
import sqlite3
import statistics
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from prefect_helpers import Child, run_states, wait_until

from lease_integrations import LEASE_LOST_EXIT_STATUS, connect

#: Where the time from a superseding run's start to its body is collected
#: (printed per test; ``-s`` shows it).
STARTS: list[float] = []


def bodies(coord: Path) -> dict[str, dict[str, Any]]:
    return {r["run"]: r for r in (json.loads(p.read_text()) for p in coord.glob("body-*.json"))}


def rows(coord: Path) -> list[tuple[int, int, float]]:
    with sqlite3.connect(coord / "ledger.db", timeout=30) as db:
        return list(db.execute("SELECT token, pid, at FROM ledger_rows ORDER BY rowid"))


def start_holder(spawn: Any, coord: Path, flow: str, **params: Any) -> tuple[Child, dict[str, Any]]:
    child = spawn(flow, **params)
    (run,) = wait_until(lambda: list(bodies(coord).values()), 240, "the holder's body")
    wait_until(lambda: len(rows(coord)) >= 3, 60, "the holder's first writes")
    return child, run


def final_state(flow_run_id: str) -> Any:
    """The run's state once it is no longer Running (a report sent as the
    process ended may still be on its way into the server: bounded poll)."""
    def final() -> Any:
        state, _ = run_states(flow_run_id)
        return state if state is not None and not state.is_running() else None
    return wait_until(final, 20, f"flow run {flow_run_id} to end")


@pytest.mark.parametrize("superseder", ["fenced_writer", "fenced_writer_async"])
def test_a_flow_run_supersedes_the_holder_run_which_ends_cancelled(
        spawn: Any, coord: Path, lease_url: str, superseder: str) -> None:
    old, old_body = start_holder(spawn, coord, "fenced_writer", region="eu")
    new = spawn(superseder, region="eu")
    new_body = wait_until(lambda: [b for r, b in bodies(coord).items() if r != old_body["run"]],
                          240, "the superseding run's body")[0]
    (coord / "release").write_text("")
    result = new.result()
    assert result["type"] == "COMPLETED", (result, new.output())
    assert old.wait(60) == LEASE_LOST_EXIT_STATUS, old.output()
    # The old run's process (and all it started) was gone when the new body
    # began, and its token was lower.
    assert new_body["token"] > old_body["token"]
    assert new_body["others_running"] == [], "the old run still ran when the new body began"
    # No write of the old run was accepted once the lease was handed to the
    # new run. (The store grants it at the break; the supersede hands it over
    # only once the old process is gone, and until then the old run's token
    # is still the highest the fence has seen.)
    ledger = rows(coord)
    late = [r for r in ledger if r[0] == old_body["token"] and r[2] >= new_body["at"]]
    assert late == [], "the fence accepted a write of the old run after the new grant"
    store = connect(lease_url)
    history = store.history("supersede-same")
    assert {r[0] for r in ledger} == {old_body["token"], new_body["token"]}
    assert [r[0] for r in ledger] == sorted(r[0] for r in ledger)
    superseded = [e for e in history if e.kind == "superseded"]
    assert [e.token for e in superseded] == [old_body["token"]]
    assert superseded[0].detail["meta"]["flow_run_id"] == new_body["run"]
    # The old run is Cancelled (replaced on purpose, not crashed), naming the new run.
    state = final_state(old_body["run"])
    assert state.is_cancelled(), (state, old.output())
    assert f"superseded by flow run {new_body['meta']['flow_run_name']!r} ({new_body['run']}" \
        in (state.message or ""), state.message
    assert final_state(new_body["run"]).is_completed()
    # The time from the superseding run's start (Running in the API) to its body.
    _, history_states = run_states(new_body["run"])
    running = next(s for s in history_states if s.is_running())
    took = new_body["at"] - running.timestamp.timestamp()
    STARTS.append(took)
    print(f"\nsupersede: the new run's body began {took:.3f} s after the run started "
          f"(median so far {statistics.median(STARTS):.3f} s over {len(STARTS)})")


def test_the_guard_refuses_a_run_of_other_parameters_and_the_holder_runs_on(
        spawn: Any, coord: Path, lease_url: str) -> None:
    old, old_body = start_holder(spawn, coord, "fenced_writer", region="eu")
    result = spawn("fenced_writer", region="us").result()
    assert result["type"] == "FAILED", result
    assert "not superseded" in result["message"], result["message"]
    assert "only_same('parameters_sha256') refused" in result["message"], result["message"]
    record = connect(lease_url).get("supersede-same")
    assert record is not None and record.held and record.token == old_body["token"]
    count = len(rows(coord))
    wait_until(lambda: len(rows(coord)) > count, 30, "the holder to write on")
    assert old.proc.is_alive()
    (coord / "release").write_text("")
    assert old.result()["type"] == "COMPLETED"
    assert [e.kind for e in connect(lease_url).history("supersede-same")] == [
        "acquired", "released"]


def test_the_guard_refuses_a_run_scheduled_earlier(
        spawn: Any, coord: Path, lease_url: str, child_env: dict[str, str]) -> None:
    """``only_newer("scheduled_start")``: a run whose scheduled start is
    earlier than the holder's (a late backfill) does not displace it."""
    old, old_body = start_holder(spawn, coord, "newest_writer", region="eu")
    started = datetime.fromisoformat(old_body["meta"]["scheduled_start"])
    assert abs(started.timestamp() - old_body["at"]) < 120
    backfill = spawn("newest_writer@scheduled:-3600", region="eu").result()
    assert backfill["type"] == "FAILED", backfill
    assert "only_newer('scheduled_start') refused" in backfill["message"], backfill["message"]
    record = connect(lease_url).get("supersede-newer")
    assert record is not None and record.held and record.token == old_body["token"]
    assert old.proc.is_alive()
    (coord / "release").write_text("")
    assert old.result()["type"] == "COMPLETED"


"""Two runs of one leased flow, started at the same time in two processes,
both reporting to the same Prefect server and sharing one SQLite store:
exactly one runs its body; the other ends as ``on_busy`` says."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prefect_helpers import entered, release, wait_until


def _holder_run(coord: Path) -> dict[str, Any]:
    (only,) = entered(coord)
    return only


@pytest.mark.parametrize(
    ("flow", "state", "word"),
    [("race_sync_skip", "CANCELLED", "Skipped"),
     ("race_sync_fail", "FAILED", "LeaseBusy"),
     ("race_async_skip", "CANCELLED", "Skipped")],
)
def test_one_runs_the_other_ends_as_configured(
    spawn: Any, coord: Path, flow: str, state: str, word: str
) -> None:
    a, b = spawn(flow), spawn(flow)
    # The loser finishes while the winner is still inside its body.
    loser = wait_until(lambda: [c for c in (a, b) if c.done()], 90, "the losing run to end")
    assert len(loser) == 1, "both runs ended: neither held the lease"
    (loser,) = loser
    winner = b if loser is a else a
    holder = wait_until(lambda: entered(coord), 60, "the winner to enter its body")
    assert len(holder) == 1

    lost = loser.result()
    assert lost["type"] == state, lost
    assert word in lost["message"]
    # The message names the holder: its holder id and its flow run.
    assert holder[0]["holder"] in lost["message"]
    assert holder[0]["run"] in lost["message"]

    release(coord)
    won = winner.result()
    assert won["type"] == "COMPLETED", winner.output()
    assert won["flow_run_id"] == holder[0]["run"]
    assert len(entered(coord)) == 1, "the losing run entered its body"


def test_wait_runs_both_one_after_the_other(spawn: Any, coord: Path) -> None:
    a, b = spawn("race_sync_wait"), spawn("race_sync_wait")
    first = wait_until(lambda: entered(coord), 90, "one run to enter")
    assert len(first) == 1
    waiter = b if first[0]["pid"] == a.pid else a
    # The waiter logs that it waits (Prefect's run logger prints to its output).
    wait_until(lambda: "Waiting for lease" in waiter.output(), 90, "the other run to wait")
    assert len(entered(coord)) == 1
    release(coord)
    results = [a.result(), b.result()]
    assert [r["type"] for r in results] == ["COMPLETED", "COMPLETED"]
    bodies = entered(coord)
    assert len(bodies) == 2
    assert all(not body["others_inside"] for body in bodies), bodies
    assert len({body["token"] for body in bodies}) == 2  # two grants, two tokens


def test_wait_timeout_fails_naming_the_holder(spawn: Any, coord: Path) -> None:
    a, b = spawn("race_async_wait_short"), spawn("race_async_wait_short")
    loser = wait_until(lambda: [c for c in (a, b) if c.done()], 90, "the timed-out run")
    assert len(loser) == 1
    holder = _holder_run(coord)
    result = loser[0].result()
    assert result["type"] == "FAILED"
    assert holder["holder"] in result["message"]
    release(coord)
    winner = b if loser[0] is a else a
    assert winner.result()["type"] == "COMPLETED"
    assert len(entered(coord)) == 1

"""The keeper under Prefect (issue 31): a flow busy in one call that keeps the
GIL for 2.5 ttl (``flows_for_tests.busy_holder``), run in a child process,
keeps its lease: the run is Completed and a contender in another process,
trying every 50 ms, is granted nothing while it runs (the store's history).
The in-process heartbeat starved in that call: the lease expired, the
contender was granted, and the run was stopped after it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from prefect_helpers import Child, wait_until

from lease_integrations import connect
from tests.keeper.keeper_runs import Contender, figures, wait_until_kept

TTL, CALL = 2.0, 5  # as in flows_for_tests.busy_holder
MARGIN = TTL / 5
KEY = "busy-holder"


def test_a_busy_flow_keeps_its_lease(spawn: Callable[..., Child], coord: Path, lease_url: str,
                                     tmp_path: Path) -> None:
    contender = Contender(tmp_path / "contender.out", lease_url, KEY, TTL)
    try:
        child = spawn("busy_holder", seconds=CALL)
        wait_until(lambda: (coord / "pid").exists() or child.done(), 120, "the flow to start")
        with connect(lease_url) as store:
            record = store.get(KEY)
        assert record is not None and record.held, record
        wait_until_kept(int((coord / "pid").read_text()), lease_url, KEY, record.token)
        (coord / "go").touch()
        wait_until(lambda: (coord / "call-start").exists() or child.done(), 30,
                   "the flow to start its call")
        call_start = float((coord / "call-start").read_text())
        contender.start_trying(before=call_start + TTL - MARGIN)
        result = child.result(CALL + 90)
        status = child.wait(30)
        contender.end()
        with connect(lease_url) as store:
            events = [(e.kind, e.token) for e in store.history(KEY)]
        call_end = coord / "call-end"
        figures(test="busy-holder", face="prefect-flow", store="sqlite",
                call_s=float(call_end.read_text()) - call_start if call_end.exists() else -1.0,
                state=result["type"], status=status)
        assert result["type"] == "COMPLETED", (result, child.output())
        assert len(events) >= 2 and events[0][0] == "acquired", events
        assert events[1] == ("released", events[0][1]), (
            f"someone was granted the busy flow's lease, or its release was refused: {events}")
    finally:
        contender.end()

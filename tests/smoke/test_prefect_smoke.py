"""Smoke test of the Prefect face, run on the oldest and the newest supported
Prefect (scripts/test.sh): two runs of one ``@leased_flow`` in two processes,
the second started while the first is inside its body, both reporting to one
Prefect server (Prefect's own ``prefect_test_harness``): the first completes
with its token, the second ends Cancelled naming the holder and never enters.
And the fail-stop path: a run whose lease is broken from outside is reported
Crashed on the server (``lease_integrations/prefect/crash.py``, through
Prefect's own client), its ``lease-integrations.lease.lost`` event reaches the
server's events API before the process exits with status 75."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from smoke_support import WAIT, Child, wait_until

from lease_integrations import connect

pytest.importorskip("prefect")

# Before Prefect is imported: a test server without the services it does not need.
for _name, _value in {
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_UI_ENABLED": "false",
    "PREFECT_SERVER_SERVICES_SCHEDULER_ENABLED": "false",
    "PREFECT_SERVER_SERVICES_LATE_RUNS_ENABLED": "false",
    "PREFECT_SERVER_SERVICES_FOREMAN_ENABLED": "false",
}.items():
    os.environ.setdefault(_name, _value)


@pytest.fixture(scope="module")
def prefect_api() -> Iterator[str]:
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=600):
        url = PREFECT_API_URL.value()
        assert url, "the Prefect test harness did not set an API URL"
        yield url


@pytest.mark.timeout(900)  # Airflow/Prefect start-up on a loaded 2-core machine
def test_overlapping_leased_flows(prefect_api: str, tmp_path: Path) -> None:
    coord = tmp_path / "coord"
    coord.mkdir()
    env = {**os.environ, "PREFECT_API_URL": prefect_api, "LEASE_SMOKE_DIR": str(coord),
           "LEASE_STORE_URL": f"sqlite://{tmp_path}/leases.db"}
    first = Child("prefect_smoke_flow.py", [], env, tmp_path / "first.log")
    second = None
    try:
        entered = wait_until(lambda: list(coord.glob("entered-*")), "the first run to enter its body")
        second = Child("prefect_smoke_flow.py", [], env, tmp_path / "second.log")
        busy = second.result()
        assert busy["type"] == "CANCELLED", busy
        assert "Skipped" in busy["message"] and "lease-smoke" in busy["message"], busy
        (coord / "release").touch()
        done = first.result()
    finally:
        (coord / "release").touch()
        first.stop()
        if second is not None:
            second.stop()
    assert done["type"] == "COMPLETED", done
    assert list(coord.glob("entered-*")) == entered, "the second run entered its body"
    assert int(entered[0].read_text()) >= 1


@pytest.mark.timeout(900)
def test_broken_lease_ends_the_run_crashed(prefect_api: str, tmp_path: Path) -> None:
    from prefect.client.orchestration import get_client

    coord = tmp_path / "coord"
    coord.mkdir()
    url = f"sqlite://{tmp_path}/leases.db"
    env = {**os.environ, "PREFECT_API_URL": prefect_api, "LEASE_SMOKE_DIR": str(coord),
           "LEASE_STORE_URL": url}
    child = Child("prefect_smoke_flow.py", ["lost"], env, tmp_path / "lost.log")
    try:
        run = json.loads(wait_until(lambda: (coord / "lost-run").exists() and
                                    (coord / "lost-run").read_text(), "the run to enter its body"))
        store = connect(url)
        try:
            broken = store.force_release("lease-smoke-lost", by="smoke-test")
        finally:
            store.close()
        assert broken is not None and broken.token == run["token"], broken
        code = child.process.wait(WAIT)
    finally:
        child.stop()
    assert code == 75, f"exit {code}:\n{child.output()[-4000:]}"
    with get_client(sync_client=True) as client:
        state = client.read_flow_run(run["id"]).state
    assert state is not None and state.is_crashed(), (state, child.output()[-4000:])
    assert "was lost" in (state.message or ""), state.message
    lost = wait_until(lambda: _lost_events(prefect_api, run["id"]), "the lost event")
    assert lost[0]["payload"]["token"] == run["token"], lost
    assert lost[0]["payload"]["reason"] in state.message, (lost, state.message)


def _lost_events(api: str, flow_run_id: str) -> list[dict[str, object]]:
    import httpx

    response = httpx.post(f"{api}/events/filter", timeout=30, json={"limit": 10, "filter": {
        "event": {"name": ["lease-integrations.lease.lost"]},
        "related": {"id": [f"prefect.flow-run.{flow_run_id}"]}}})
    response.raise_for_status()
    events: list[dict[str, object]] = response.json()["events"]
    return events

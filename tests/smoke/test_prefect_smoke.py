"""Smoke test of the Prefect face, run on the oldest and the newest supported
Prefect (scripts/test.sh): two runs of one ``@leased_flow`` in two processes,
the second started while the first is inside its body, both reporting to one
Prefect server (Prefect's own ``prefect_test_harness``): the first completes
with its token, the second ends Cancelled naming the holder and never enters."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from smoke_support import Child, wait_until

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

"""Contract 2 of issue 31: nothing in the job's own ladder can delay the hard
stop. A logging handler that blocks forever (the ladder's first step is a log
line and a flush) or an ``on_lost`` callback that never returns: after a
break, the job's process tree is still gone within a heartbeat plus the
ladder's budget (0.8 margin), well before the margin is up. On SQLite and
Redis, with the keeper and with the renewer in the job's own thread
(``LEASE_KEEPER=off``): one ladder, whoever renews."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from lease_integrations import LEASE_LOST_EXIT_STATUS, connect
from tests.conftest import store_url_for
from tests.keeper.keeper_observe import wait_gone
from tests.keeper.keeper_runs import Run, figures

TTL = 2.0
HEARTBEAT, MARGIN = TTL / 3, TTL / 5
BOUND = HEARTBEAT + 0.8 * MARGIN


@pytest.fixture(params=["sqlite", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return store_url_for(request, request.param, tmp_path)


@pytest.mark.parametrize("mode", ["keeper", "thread"])
@pytest.mark.parametrize("stuck", ["--log-blocks", "--callback-hangs"])
def test_a_stuck_ladder_step_does_not_delay_the_stop(url: str, key: str, stuck: str, mode: str,
                                                     start_job: Callable[..., Run],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    if mode == "thread":
        monkeypatch.setenv("LEASE_KEEPER", "off")
    job = start_job(url, key, "--ttl", str(TTL), "--sleep", "60", "--children", stuck,
                    "--wait-go")
    if mode == "keeper":
        assert job.go_once_kept(url, key) is not None, "the job has no keeper"
    else:
        job.go()
    processes = job.tree()
    assert len(processes) >= 3, processes
    with connect(url) as store:
        broke = time.monotonic()
        assert store.force_release(key, by="test") is not None
        gone = wait_gone(processes, 5)
    status = job.process.wait(10)
    figures(test="stuck-ladder", step=stuck.lstrip("-"), mode=mode, store=url.split(":")[0],
            break_to_gone_s=gone - broke,
            bound_s=BOUND, status=status)
    assert status in (LEASE_LOST_EXIT_STATUS, -9), status
    assert "block-ended" not in job.lines()
    assert gone - broke <= BOUND, (
        f"the job's tree was gone {gone - broke:.3f} s after the break, past "
        f"heartbeat + 0.8 margin = {BOUND:.3f} s")

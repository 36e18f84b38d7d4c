"""A job whose threads start processes while its ladder runs (a worker
loop that forks per item): the ladder freezes what is below the job, but
the job's threads run on until it exits, and a child forked after the
freeze is not in that frozen set. After a break, nothing of the job, those
late children included, may write past the ladder's bound (a heartbeat
plus 0.8 margin), with the keeper and without it. And what the job did not
start is not its to end, even in its process group: the job runs as a
shell runs ``job | logger``, and the sibling lives on."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lease_integrations import LEASE_LOST_EXIT_STATUS, connect
from tests.cli.cli_helpers import poll
from tests.keeper.keeper_observe import cmdline, stamps
from tests.keeper.keeper_runs import CONTAINED_TTL, Run, figures, wait_until_kept

HEARTBEAT, MARGIN = CONTAINED_TTL / 3, CONTAINED_TTL / 5
BOUND = HEARTBEAT + 0.8 * MARGIN
WATCH = 1.5  # seconds past the bound in which no stamp of the job's may appear


@pytest.fixture(params=["sqlite", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    from tests.conftest import store_url_for

    return store_url_for(request, request.param, tmp_path)


@pytest.fixture
def pipeline(tmp_path: Path) -> Iterator[list[Run]]:
    runs: list[Run] = []
    yield runs
    for run in runs:
        run.end()
    _end_escaped(tmp_path / "stamps")


def _end_escaped(path: Path) -> None:
    """Late children that outlived the job (a failure) belong to init: end
    each still this test's (its command line names our stamps file, checked
    again once a pidfd pins it), so a failure leaves nothing running."""
    for who in stamps(path):
        if not who.startswith("late-"):
            continue
        pid = int(who.removeprefix("late-"))
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            continue
        try:
            if str(path) in cmdline(pid):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        finally:
            os.close(pidfd)


@pytest.mark.parametrize("mode", ["keeper", "thread"])
def test_children_forked_during_the_ladder_end_and_a_pipeline_sibling_lives(
        url: str, key: str, mode: str, tmp_path: Path, pipeline: list[Run],
        monkeypatch: pytest.MonkeyPatch) -> None:
    if mode == "thread":
        monkeypatch.setenv("LEASE_KEEPER", "off")
    path = tmp_path / "stamps"
    run = Run(tmp_path / "pipeline.out", str(path), url, key, str(path), "--ttl",
              str(CONTAINED_TTL), "--fork-forever", module="tests.keeper.pipeline_launcher",
              own_group=True)
    pipeline.append(run)
    _, token, job_pid = run.wait_for("held")
    if mode == "keeper":
        assert wait_until_kept(int(job_pid), url, key, int(token)) is not None, \
            "the job has no keeper"
    run.go()
    poll(lambda: any(w.startswith("late-") for w in stamps(path)), 30,
         "the first late child's stamp", 0.01)
    with connect(url) as store:
        broke = time.monotonic()
        assert store.force_release(key, by="test") is not None
    status = int(run.wait_for("job-exit", BOUND + 10)[0])
    quiet_from = broke + BOUND
    # An observation window, not a synchronisation: a process that escaped
    # stamps every 20 ms, so 1.5 s shows it many times over.
    time.sleep(max(0.0, quiet_from + WATCH - time.monotonic()))
    seen = stamps(path)
    late = {who: round(at - quiet_from, 3) for who, at in seen.items()
            if at > quiet_from and who != "sibling"}
    figures(test="children-born-during-ladder", mode=mode, store=url.split(":")[0],
            status=status, late_children=sum(w.startswith("late-") for w in seen),
            last_stamp_after_break_s=max(at for w, at in seen.items() if w != "sibling") - broke)
    assert status in (LEASE_LOST_EXIT_STATUS, -9), status
    assert not late, f"stamped past the ladder's bound (seconds after it): {late}"
    assert seen["sibling"] > quiet_from + WATCH - 0.5, \
        "the pipeline's sibling, which the job did not start, was ended with it"

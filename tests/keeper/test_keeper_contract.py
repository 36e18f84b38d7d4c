"""The keeper's contract when a process dies or stops (issue 31, contract
items 3-5): a job stopped alone, a job killed while its child runs, a keeper
killed mid-hold. Each job is a real process (``keeper_job.py``) at ttl 2 s,
observed from outside through the store, ``/proc`` and exit statuses."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

import pytest

from lease_integrations import connect
from tests.keeper.keeper_observe import (
    Process,
    alive,
    expires_at,
    job_process,
    keeper_of,
    renewed_by_the_keeper,
    wait_gone,
    wait_stopped,
)
from tests.keeper.keeper_runs import Contender, Run, figures

TTL = 2.0
HEARTBEAT, MARGIN = TTL / 3, TTL / 5
#: A renewal the keeper sent just before the job stopped or died may still
#: land, however late a loaded machine makes it: one, never a second.
IN_FLIGHT = 1
#: The killed job's keeper must notice the death, end the tree and release within
#: this ttl: at 2 s a loaded machine (load 5) let the lease expire first.
KILLED_TTL = 5.0
#: "Within milliseconds" (the death pipe), with room for a loaded machine.
DEATH_PIPE_BOUND = 0.5


@pytest.fixture(params=["sqlite", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: os.PathLike[str]) -> str:
    from tests.conftest import store_url_for

    return store_url_for(request, request.param, tmp_path)


def test_a_job_stopped_alone_is_not_renewed_and_is_killed_at_its_deadline(
        url: str, key: str, start_job: Callable[..., Run],
        start_contender: Callable[..., Contender]) -> None:
    """SIGSTOP of the job process alone (state T; its child runs on): the
    lease is not renewed past the stop, and every process of the job is
    gone before the contender's grant."""
    contender = start_contender(url, key)
    job = start_job(url, key, "--ttl", str(TTL), "--sleep", "60", "--children")
    token = int(job.lines()["held"][1])
    processes = job.tree()
    contender.wait_for("ready")
    with connect(url) as store:
        renewed_by_the_keeper(store, key, token)
        os.kill(job.pid, signal.SIGSTOP)
        stopped, stopped_wall = wait_stopped(job_process(processes, job.pid))
        contender.go()
        expiries: set[float] = set()
        while contender.grant() is None and any(alive(p) for p in processes):
            at = expires_at(store, key, token)
            if at is not None:
                expiries.add(at.timestamp())
            assert time.monotonic() < stopped + 3 * TTL, "nothing happened to the stopped job"
            time.sleep(0.01)
        gone = wait_gone(processes, 2 * TTL)
    late = sorted(at - TTL - stopped_wall for at in expiries if at > stopped_wall + TTL)
    granted = float(contender.wait_for("granted", 3 * TTL)[1])
    status = job.process.wait(10)
    figures(test="sigstop", store=url.split(":")[0], stop_to_gone_s=gone - stopped,
            stop_to_grant_s=granted - stopped, margin_left_s=granted - gone,
            renewals_after_stop=len(late), renewed_after_stop_s=late[-1] if late else 0.0,
            status=status)
    assert gone < granted, f"the stopped job ran {gone - granted:.3f} s past the contender's grant"
    assert len(late) <= IN_FLIGHT, (
        f"the stopped job's lease was renewed {len(late)} times after it was seen stopped, "
        f"at {', '.join(f'+{t:.3f} s' for t in late)}")
    assert status == -9, status


def test_a_killed_job_has_its_tree_ended_then_its_lease_released(
        url: str, key: str, start_job: Callable[..., Run],
        start_contender: Callable[..., Contender]) -> None:
    """SIGKILL of the job inside its block while its child runs (in a
    session of its own, out of the job's group): no renewal after it (the
    record's ``expires_at`` stops moving); the keeper ends the child and
    grandchild it saw below the job, then releases the lease at once (issue
    39: before, the lease was left to expire and the child ran on). The
    contender is granted only once nothing of the job runs; the keeper is
    gone by then."""
    contender = start_contender(url, key, KILLED_TTL)
    job = start_job(url, key, "--ttl", str(KILLED_TTL), "--sleep", "60", "--children")
    token = int(job.lines()["held"][1])
    processes = job.tree()
    keeper = keeper_of(job.pid)
    contender.wait_for("ready")
    with connect(url) as store:
        renewed_by_the_keeper(store, key, token)
        os.kill(job.pid, signal.SIGKILL)
        killed = wait_gone({job_process(processes, job.pid)}, 5)
        killed_wall = time.time()
        contender.go()
        expiries: set[float] = set()
        keeper_gone = None
        while contender.grant() is None:
            at = expires_at(store, key, token)
            if at is not None:
                expiries.add(at.timestamp())
            if keeper_gone is None and not alive(keeper):
                keeper_gone = time.monotonic()
            assert time.monotonic() < killed + 3 * KILLED_TTL, "the contender was never granted"
            time.sleep(0.01)
        children_at_grant = [p for p in processes if p[0] != job.pid and alive(p)]
        events = store.history(key)
    grant = next(e for e in events if e.kind == "acquired" and e.token != token)
    released = [e for e in events if e.token == token and e.kind == "released"]
    late = sorted(at - KILLED_TTL - killed_wall for at in expiries if at > killed_wall + KILLED_TTL)
    figures(test="job-sigkill", store=url.split(":")[0], renewals_after_kill=len(late),
            renewed_after_kill_s=late[-1] if late else 0.0,
            kill_to_grant_s=grant.at.timestamp() - killed_wall,
            keeper_gone_after_s=-1.0 if keeper_gone is None else keeper_gone - killed,
            released=bool(released), children_alive_at_grant=len(children_at_grant))
    assert job.process.wait(10) == -9
    assert len(late) <= IN_FLIGHT, (
        f"the dead job's lease was renewed {len(late)} times after it died, "
        f"at {', '.join(f'+{t:.3f} s' for t in late)}")
    assert not children_at_grant, f"alive at the contender's grant: {children_at_grant}"
    assert released, f"the keeper did not release the dead job's lease: {events}"
    assert keeper_gone is not None or not alive(keeper), "the keeper outlived the dead job"


@pytest.mark.parametrize("busy", [False, True], ids=["idle", "gil-held"])
def test_a_killed_keeper_takes_the_job_with_it(
        url: str, key: str, busy: bool, start_job: Callable[..., Run]) -> None:
    """SIGKILL of the keeper mid-hold, the job idle (a sleep) or inside a call
    that keeps the GIL: the job is gone within a few hundred milliseconds,
    by the kernel (the death pipe), not by its own interpreter."""
    work = ["--gil", "5"] if busy else ["--sleep", "60"]
    job = start_job(url, key, "--ttl", str(TTL), *work, "--children", "--wait-go")
    processes = job.tree()
    keeper: Process | None = job.go_once_kept(url, key)
    assert keeper is not None, "the job has no keeper"
    if busy:
        job.wait_for("call-start")
    os.kill(keeper[0], signal.SIGKILL)
    killed = time.monotonic()
    job_gone = wait_gone({p for p in processes if p[0] == job.pid}, 5)
    status = job.process.wait(10)
    children = [p for p in processes if p[0] != job.pid and alive(p)]
    figures(test="keeper-sigkill", store=url.split(":")[0], gil_held=busy,
            kill_to_job_gone_s=job_gone - killed, status=status,
            children_alive_after=len(children))
    assert status == -9, status
    assert "call-end" not in job.lines()
    assert job_gone - killed <= DEATH_PIPE_BOUND, (
        f"the job outlived its keeper by {job_gone - killed:.3f} s")


@pytest.mark.parametrize("stuck", [None, "--callback-hangs"])
def test_a_lease_broken_while_its_keeper_starts_still_ends_the_whole_tree(
        url: str, key: str, stuck: str | None, start_job: Callable[..., Run]) -> None:
    """The break comes at once, before the keeper's first renewal: the job's
    child and grandchild are gone with the job within a heartbeat plus the
    ladder's budget (0.8 margin)."""
    job = start_job(url, key, "--ttl", str(TTL), "--sleep", "60", "--children",
                    *([stuck] if stuck else []))
    processes = job.tree()
    with connect(url) as store:
        broke = time.monotonic()
        assert store.force_release(key, by="test") is not None
        gone = wait_gone(processes, 5)
    status = job.process.wait(10)
    figures(test="broken-at-start", store=url.split(":")[0], stuck=stuck, break_to_gone_s=gone - broke,
            bound_s=HEARTBEAT + 0.8 * MARGIN, status=status)
    assert status in (75, -9), status
    assert gone - broke <= HEARTBEAT + 0.8 * MARGIN, (
        f"the job's tree was gone {gone - broke:.3f} s after the break")

"""A live job busy in one call that keeps the GIL (issue 31, contract 1 and 2).

The job (``keeper_job.py``) holds its lease at ttl 2 s (heartbeat 0.67 s,
margin 0.4 s) and spends 2.5 ttl in ``ctypes.PyDLL(None).sleep``, which never
lets its interpreter run. A contender in another process tries every 50 ms.
Judged from outside: the store's history, the contender's log, the job's exit
status and output, and ``/proc``. Before the keeper the job's own heartbeat
thread starved: the store expired the lease at 2 s, the contender was granted
while the call ran, and the job died with 75 after it."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from lease_integrations import connect
from tests.conftest import store_url_for
from tests.keeper.keeper_observe import least_time_to_expiry, wait_gone
from tests.keeper.keeper_runs import Contender, Run, figures
from tests.safety.proxy import FaultProxy

TTL, CALL = 2.0, 5  # the call keeps the GIL 2.5 ttl
HEARTBEAT, MARGIN = TTL / 3, TTL / 5
BUDGET = 0.8 * MARGIN  # the ladder's: the whole stop, from the loss being known
LEASECTL = Path(sys.executable).parent / "leasectl"
#: Through the test's own proxy (threads in this busy process) a renewal took
#: 1.55 s on a loaded machine before any cut, and the lease was rightly lost
#: before the scenario began: twice the ttl leaves it room.
PROXIED_TTL, PROXIED_CALL = 2 * TTL, 2 * CALL


def wall_to_monotonic(at: float) -> float:
    """A store's timestamp (this host's wall clock) on the monotonic clock."""
    return at - (time.time() - time.monotonic())


@pytest.mark.parametrize("kind", ["memory", "sqlite", "redis", "postgres"])
def test_a_busy_holder_keeps_its_lease(kind: str, request: pytest.FixtureRequest,
                                       tmp_path: Path, key: str,
                                       start_job: Callable[..., Run],
                                       start_contender: Callable[..., Contender]) -> None:
    if kind == "memory":
        pytest.skip("memory:// cannot be reopened in a keeper process: it keeps the in-process "
                    "heartbeat, which a call that keeps the GIL starves (the documented limit)")
    url = store_url_for(request, kind, tmp_path)
    contender = start_contender(url, key)
    job = start_job(url, key, "--ttl", str(TTL), "--gil", str(CALL), "--wait-go")
    token = int(job.lines()["held"][1])
    job.go_once_kept(url, key)
    call_start = float(job.wait_for("call-start")[0])
    contender.start_trying(before=call_start + TTL - MARGIN)
    with connect(url) as store:
        tightest = least_time_to_expiry(store, key, token, lambda: job.process.poll() is None)
        status = job.process.wait()
        out = job.lines()
        contender.end()
        events = [(e.kind, e.token) for e in store.history(key)]
    call = float(out["call-end"][0]) - call_start if "call-end" in out else float("nan")
    figures(test="busy-holder", store=kind, call_s=call, least_time_to_expiry_s=tightest,
            status=status)
    assert status == 0, f"the busy job did not end normally: {job.out.read_text()}"
    assert "block-ended" in out
    # Its release was accepted, and nobody was granted before it.
    assert events[:2] == [("acquired", token), ("released", token)], events
    assert tightest > 0, "the store let the busy job's lease expire"


@pytest.mark.parametrize("kind", ["sqlite", "redis", "postgres"])
def test_a_busy_holder_broken_by_leasectl_is_killed_from_outside(
        kind: str, request: pytest.FixtureRequest, tmp_path: Path, key: str,
        start_job: Callable[..., Run]) -> None:
    """``leasectl break`` while the job is inside the call: its process, its
    child and grandchild (in a session of their own) are gone within a
    heartbeat plus the ladder's budget of the break, though the job's
    interpreter never ran again (it is SIGKILLed; nothing after the call)."""
    url = store_url_for(request, kind, tmp_path)
    job = start_job(url, key, "--ttl", str(TTL), "--gil", str(CALL), "--children", "--wait-go")
    job.go_once_kept(url, key)
    job.wait_for("call-start")
    processes = job.tree()
    assert len(processes) >= 3, processes  # the job, its child shell, the sleep
    cli = subprocess.run([str(LEASECTL), "--url", url, "break", key, "--yes", "--by", "test"],
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert cli.returncode == 0, cli.stderr
    gone = wait_gone(processes, CALL + 2)
    with connect(url) as store:
        broken = [e for e in store.history(key) if e.kind == "broken"]
    assert broken, "leasectl recorded no break"
    broke = wall_to_monotonic(broken[-1].at.timestamp())
    status = job.process.wait(10)
    out = job.lines()
    figures(test="busy-broken", store=kind, break_to_gone_s=gone - broke,
            bound_s=HEARTBEAT + BUDGET, status=status, ran_after_call="call-end" in out)
    assert status == -9, f"the job was not SIGKILLed (status {status}): {out}"
    assert "call-end" not in out and "block-ended" not in out, out
    assert gone - broke <= HEARTBEAT + BUDGET, (
        f"the job's tree was gone {gone - broke:.3f} s after the break, past "
        f"heartbeat + 0.8 margin = {HEARTBEAT + BUDGET:.3f} s")


def through(proxy: FaultProxy, url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=parts.netloc.replace(f":{parts.port}",
                                                                 f":{proxy.port}")))


@pytest.mark.parametrize(("kind", "when"), [("redis", "renewing"), ("postgres", "renewing"),
                                           ("redis", "at-once")])
def test_a_busy_holder_cut_off_from_its_store_is_gone_before_the_next_grant(
        kind: str, when: str, request: pytest.FixtureRequest, tmp_path: Path, key: str,
        start_job: Callable[..., Run], start_contender: Callable[..., Contender]) -> None:
    """The store stops answering the job (a proxy that forwards nothing) while
    the job is inside the call; the contender still reaches the store. Every
    process of the job is gone before the contender's grant. ``renewing``:
    cut off once the keeper renews the lease; ``at-once``: as soon as the
    call began, right after the grant, whether or not the keeper has reached
    the store yet."""
    url = store_url_for(request, kind, tmp_path)
    target = urlsplit(url)
    assert target.hostname is not None and target.port is not None
    proxy = FaultProxy(target.hostname, target.port)
    try:
        contender = start_contender(url, key)
        job = start_job(through(proxy, url), key, "--ttl", str(PROXIED_TTL),
                        "--gil", str(PROXIED_CALL),
                        "--children", "--wait-go")
        if when == "renewing":
            job.go_once_kept(url, key)
        else:
            job.go()
        job.wait_for("call-start")
        processes = job.tree()
        assert len(processes) >= 3, processes
        contender.wait_for("ready")
        proxy.blackhole()
        blackholed = time.monotonic()
        contender.go()
        gone = wait_gone(processes, PROXIED_CALL + 2)
        granted_at = float(contender.wait_for("granted", 3 * PROXIED_TTL)[1])
        status = job.process.wait(10)
        out = job.lines()
        figures(test="trust-window", store=kind, cut_off=when,
                blackhole_to_gone_s=gone - blackholed,
                blackhole_to_grant_s=granted_at - blackholed,
                margin_left_s=granted_at - gone, status=status)
        assert gone < granted_at, (
            f"a process of the job ran {gone - granted_at:.3f} s past the contender's grant")
        assert "call-end" not in out, "the job's interpreter ran before it was stopped"
    finally:
        proxy.close()

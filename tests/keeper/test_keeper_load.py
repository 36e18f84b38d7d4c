"""Issue 31's load case: 200 busy Python threads, then one call that keeps
the GIL for 1.5 ttl, at ttl 6 s. No false loss: the block ends normally and
no contender in another process is granted meanwhile. The in-process
heartbeat lost this lease (its thread got no turn in the call)."""

from __future__ import annotations

from collections.abc import Callable

from lease_integrations import connect
from tests.keeper.keeper_observe import least_time_to_expiry
from tests.keeper.keeper_runs import Contender, Run, figures

TTL, THREADS, BUSY_FIRST, CALL = 6.0, 200, 3.0, 9


def test_busy_threads_and_a_gil_call_lose_no_lease(redis_url: str, key: str,
                                                   start_job: Callable[..., Run],
                                                   start_contender: Callable[..., Contender],
                                                   ) -> None:
    contender = start_contender(redis_url, key, TTL)
    job = start_job(redis_url, key, "--ttl", str(TTL), "--threads", str(THREADS),
                    "--busy-first", str(BUSY_FIRST), "--gil", str(CALL), "--wait-go")
    # The contender starts before the job's 200 threads do: started after, its
    # start waited on this process's poll of a saturated machine (once 5 s).
    started = contender.start_now()
    job.go_once_kept(redis_url, key)
    held = job.lines()["held"]
    token = int(held[1])
    before = float(job.wait_for("go")[0]) + TTL - TTL / 5
    assert started < before, "the contender started too late to judge anything"
    with connect(redis_url) as store:
        tightest = least_time_to_expiry(store, key, token, lambda: job.process.poll() is None)
        status = job.process.wait()
        contender.end()
        events = [(e.kind, e.token) for e in store.history(key)]
    out = job.lines()
    call = float(out["call-end"][0]) - float(out["call-start"][0]) if "call-end" in out else -1.0
    figures(test="load", threads=THREADS, ttl=TTL, call_s=call,
            least_time_to_expiry_s=tightest, status=status)
    assert status == 0, f"a false loss under load: {job.out.read_text()}"
    assert "block-ended" in out
    assert events[:2] == [("acquired", token), ("released", token)], events
    assert tightest > 0, "the store let the busy job's lease expire"

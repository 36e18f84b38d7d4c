"""Fail-stop on loss (``on_lost="exit"``, the default): a lost lease ends the
whole job, in the shapes the old in-thread interrupt could not reach (a thread
pool, a long C call on a worker thread, a child process in its own session and
its grandchild), on memory, SQLite and Redis, with the keeper and with the
renewer in the job's own thread (``LEASE_KEEPER=off``; memory:// always). Each job is a real process
(``failstop_job.py``) broken from outside, as ``leasectl break`` does; the
evidence is its own work log, written by every thread and child.

Each test prints the time from the loss being known (the lease's ``on_lost``
callback ran) to the last sign of work."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lease_integrations import LEASE_LOST_EXIT_STATUS, LeaseLock, connect
from tests.conftest import store_url_for
from tests.safety.proxy import FaultProxy

TTL = 3.0  # heartbeat 1 s, margin 0.6 s, grace 0.15 s
HEARTBEAT, GRACE = TTL / 3, TTL / 5 / 4
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["memory", "sqlite", "redis", "sqlite-thread", "redis-thread"])
def url(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    kind, _, mode = request.param.partition("-")
    if mode == "thread":
        monkeypatch.setenv("LEASE_KEEPER", "off")  # the job's processes inherit it
    return store_url_for(request, kind, tmp_path)


def start_job(url: str, key: str, shape: str, evidence: Path,
              ) -> tuple[subprocess.Popen[str], list[int]]:
    job = subprocess.Popen(
        [sys.executable, "-m", "tests.core.failstop_job", url, key, shape, str(evidence),
         "--ttl", str(TTL), *(["--self-break"] if url.startswith("memory://") else [])],
        stdout=subprocess.PIPE, text=True, cwd=ROOT, env=os.environ)
    assert job.stdout is not None
    if not select.select([job.stdout], [], [], 60)[0]:
        job.kill()
        pytest.fail("the job did not start within 60 s")
    line = job.stdout.readline().split()
    assert line[:1] == ["held"], f"the job did not start: {line}"
    return job, [int(pid) for pid in line[2:]]


def alive(pid: int) -> bool:
    """Running (not a zombie waiting for a parent that is gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def ticks(evidence: Path) -> list[tuple[float, str]]:
    lines = (evidence / "ticks").read_text().splitlines()
    return [(float(at), who) for at, who in (line.split() for line in lines if line.strip())]


@pytest.mark.parametrize("shape", ["threads", "child", "c-call", "main-sleep", "socket-read",
                                   "hook-ends-child"])
def test_a_lost_lease_ends_the_whole_job(url: str, key: str, shape: str, tmp_path: Path) -> None:
    job, pids = start_job(url, key, shape, tmp_path)
    try:
        if not url.startswith("memory://"):
            with connect(url) as store:
                assert store.force_release(key, by="test") is not None
        assert job.wait(timeout=20) == LEASE_LOST_EXIT_STATUS, "the job was not stopped by fail-stop"
        ended = time.time()
        assert job.stdout is not None
        assert select.select([job.stdout], [], [], 10)[0], "the job's stdout stayed open"
        assert "the block ended" not in job.stdout.read()
        lost_at = float((tmp_path / "lost").read_text())
        log = ticks(tmp_path)
        last_work = max((at for at, _ in log), default=lost_at)
        print(f"\n{shape} on {url.split(':')[0]}: last work {last_work - lost_at:+.3f} s, "
              f"process gone {ended - lost_at:+.3f} s after the loss was known")
        assert last_work <= lost_at + HEARTBEAT + GRACE, (last_work - lost_at, log[-5:])
        if shape != "hook-ends-child":  # there the main thread wakes by design
            assert not any(who in ("after-sleep", "block-ended") for _, who in log)
        wait_gone(pids)  # frozen since the exit; ended by SIGTERM, or SIGKILL after the grace
        assert max((at for at, _ in ticks(tmp_path)), default=lost_at) == last_work
        if shape in ("child", "hook-ends-child"):
            assert {"child0", "child1"} <= {who for _, who in log}, "no grandchild ran"
    finally:
        kill_left(job, pids)


def test_the_tree_is_ended_even_when_no_step_can_start_a_thread(url: str, key: str,
                                                                 tmp_path: Path) -> None:
    """Python 3.12 refuses new threads once the interpreter is ending, and a
    stop hook that ends what the main thread waits for lets it end the
    interpreter while the ladder runs (``hook-ends-child`` met this about
    one run in eight). Each bounded step then fails to start its thread:
    the steps are skipped, and the tree is still frozen and ended."""
    job, pids = start_job(url, key, "no-new-threads", tmp_path)
    try:
        if not url.startswith("memory://"):
            with connect(url) as store:
                assert store.force_release(key, by="test") is not None
        assert job.wait(timeout=20) == LEASE_LOST_EXIT_STATUS, "the job was not stopped by fail-stop"
        wait_gone(pids)
    finally:
        kill_left(job, pids)


def kill_left(job: subprocess.Popen[str], pids: list[int]) -> None:
    """After a failed check: nothing this test started may outlive it."""
    if job.poll() is None:
        job.kill()
        job.wait()
    for pid in pids:
        if alive(pid):
            os.kill(pid, 9)


def wait_gone(pids: list[int]) -> None:
    deadline = time.monotonic() + GRACE + 5
    while [pid for pid in pids if alive(pid)]:
        assert time.monotonic() < deadline, "a child process outlived the job"
        time.sleep(0.01)


def test_trust_window_all_work_stops_before_the_contenders_grant(redis_url: str, key: str,
                                                                  tmp_path: Path) -> None:
    """The store stops answering the holder (a proxy that stops forwarding)
    while a contender, which still reaches it, keeps trying. The holder's
    threads, its child and grandchild must all have stopped before the store
    granted the key again, by the store's own clock (one host: Redis ``TIME``
    and ``time.time()`` read the same clock)."""
    host, port = redis_url.split("//")[1].split("/")[0].split(":")
    proxy = FaultProxy(host, int(port))
    job, pids = start_job(f"redis://127.0.0.1:{proxy.port}/0", key, "mixed", tmp_path)
    store = connect(redis_url)
    try:
        proxy.blackhole()
        blackholed = time.time()
        contender = LeaseLock(store, key, ttl=30.0, on_lost="check")
        lease = contender.acquire(wait=TTL * 3)  # polls until the store's expiry
        granted = lease.acquired_at
        assert granted is not None
        assert job.wait(timeout=10) == LEASE_LOST_EXIT_STATUS
        wait_gone(pids)
        log = ticks(tmp_path)
        last_work = max(at for at, _ in log)
        lost_at = float((tmp_path / "lost").read_text())
        print(f"\ntrust window: blackholed at 0, loss known {lost_at - blackholed:+.3f} s, "
              f"last work {last_work - blackholed:+.3f} s, grant {granted.timestamp() - blackholed:+.3f} s: "
              f"the last work stopped {granted.timestamp() - last_work:.3f} s before the grant")
        assert {"thread0", "thread1", "child0", "child1"} <= {who for _, who in log}
        assert last_work < granted.timestamp(), (last_work, granted)
        contender.release(lease)
    finally:
        proxy.close()
        store.close()
        kill_left(job, pids)

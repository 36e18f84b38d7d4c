"""Issue 39: the whole job is contained even when its keeper cannot help.

The job (``contained_job.py``) runs in a process group of its own, as task
runners start a task, holds its lease at ttl 5 s and starts a ``subprocess``
child and a ``multiprocessing`` child; the job and both children append
time-stamped lines to one file. Each test makes one fault, a contender waits
for the lease, and the stamps judge: nothing of the job or its children is
stamped after the contender's grant (after a thaw, nothing later than a
second after it), and the grant comes. Faults: the job SIGKILLed (the OOM
killer), the keeper SIGKILLed, the keeper SIGSTOPped, the job's group and
the keeper stopped past the ttl and resumed (a host suspend), every
descriptor closed inside the block, ``execv`` inside the block."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli.cli_helpers import poll
from tests.keeper.keeper_observe import Process, alive, armed_readers, gone_and_late, stamps
from tests.keeper.keeper_runs import CONTAINED_TTL, Contender, Run, figures, wait_until_kept

TTL = CONTAINED_TTL
#: After a thaw, the job's tree may write for at most this long.
AFTER_THAW = 1.0
FAULTS = ["job-sigkill", "keeper-sigkill", "keeper-sigstop", "suspend", "closerange", "execv"]


@pytest.fixture(params=["sqlite", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: os.PathLike[str]) -> str:
    from tests.conftest import store_url_for

    return store_url_for(request, request.param, tmp_path)


@pytest.mark.parametrize("fault", FAULTS)
def test_nothing_of_the_job_runs_after_the_contenders_grant(
        url: str, key: str, fault: str, tmp_path: Path, start_contained: Callable[..., Run],
        start_contender: Callable[..., Contender]) -> None:
    contender = start_contender(url, key, TTL)
    path = tmp_path / "stamps"
    in_job = fault in ("closerange", "execv")
    job = start_contained(url, key, path, fault if in_job else "none")
    keeper = wait_until_kept(job.pid, url, key, int(job.wait_for("held")[1]))
    assert keeper is not None, "the job has no keeper"
    poll(lambda: {"sub", "mp"} <= set(stamps(path)), 30, "both children's stamps", 0.01)
    processes: set[Process] = job.tree()
    job.seen.add(keeper)
    assert len(processes) >= 3, processes
    contender.start_now()
    thawed = None
    faulted = time.monotonic()
    if in_job:
        job.go()
    elif fault == "job-sigkill":
        os.kill(job.pid, signal.SIGKILL)
    elif fault == "keeper-sigkill":
        os.kill(keeper[0], signal.SIGKILL)
    elif fault == "keeper-sigstop":
        os.kill(keeper[0], signal.SIGSTOP)
    elif fault == "suspend":
        os.killpg(job.pid, signal.SIGSTOP)
        os.kill(keeper[0], signal.SIGSTOP)
        # The suspend itself lasts past the ttl: a duration, not a synchronisation.
        time.sleep(TTL + 1.0)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGCONT)
        for process in processes | {keeper}:
            if alive(process):
                os.kill(process[0], signal.SIGCONT)
        thawed = time.monotonic()
    got_at = float(contender.wait_for("granted", 4 * TTL)[2])
    gone, seen, late = gone_and_late(processes, path, got_at)
    latest = max(seen.values())
    figures(test="contained", fault=fault, store=url.split(":")[0],
            fault_to_grant_s=got_at - faulted, last_stamp_before_grant_s=got_at - latest,
            stampers=",".join(sorted(seen)))
    assert not late, f"stamped after the contender's grant (seconds after it): {late}"
    if thawed is not None:
        assert latest <= thawed + AFTER_THAW, f"stamped {latest - thawed:.3f} s after the thaw"
    assert gone, "a process of the job outlived the contender's grant"


@pytest.mark.parametrize("fault", ["keeper-sigkill", "keeper-sigstop", "job-sigkill",
                                   "keeper-sigstop-job-sigkill", "keeper-sigstop-job-sigkill-hog"])
def test_a_child_in_a_session_of_its_own_ends_before_the_contenders_grant(
        url: str, key: str, fault: str, tmp_path: Path, start_contained: Callable[..., Run],
        start_contender: Callable[..., Contender]) -> None:
    """The job's ``subprocess`` child runs in a session of its own (as
    Airflow's ``SubprocessHook`` starts a ``BashOperator``'s command), with a
    child of its own there: a signal to the job's group misses both. When
    the keeper dies (or is stopped until its timer kills it), or the job
    dies, that group must end too, before the lease can be granted again;
    the job's death by the kernel alone, its keeper frozen (it cannot look)."""
    contender = start_contender(url, key, TTL)
    path = tmp_path / "stamps"
    # "hog": the job has taken its low free descriptors, so the read ends the
    # library opens for the child's group get numbers above its pipes' ends
    # (the kernel releases a dying process's files highest number first).
    hog = ("--hog-descriptors", "40") if fault.endswith("-hog") else ()
    job = start_contained(url, key, path, "none", "--session", *hog)
    keeper = wait_until_kept(job.pid, url, key, int(job.wait_for("held")[1]))
    assert keeper is not None, "the job has no keeper"
    poll(lambda: {"sub", "subsub", "mp"} <= set(stamps(path)), 30, "the children's stamps", 0.01)
    processes: set[Process] = job.tree()
    job.seen.add(keeper)
    assert len(processes) >= 4, processes
    # The job looks below itself every quarter second; once it has seen the
    # child's group, each death pipe has a second armed read end (O_ASYNC).
    poll(lambda: armed_readers(job.pid) >= 4 or None, 10, "the child's group contained", 0.01)
    contender.start_now()
    faulted = time.monotonic()
    if "job-sigkill" in fault:
        if fault.startswith("keeper-sigstop"):
            os.kill(keeper[0], signal.SIGSTOP)
        os.kill(job.pid, signal.SIGKILL)
    else:
        os.kill(keeper[0], signal.SIGKILL if fault == "keeper-sigkill" else signal.SIGSTOP)
    got_at = float(contender.wait_for("granted", 4 * TTL)[2])
    gone, seen, late = gone_and_late(processes, path, got_at)
    figures(test="contained-session", fault=fault, store=url.split(":")[0],
            fault_to_grant_s=got_at - faulted, last_stamp_before_grant_s=got_at - max(seen.values()))
    assert not late, f"stamped after the contender's grant (seconds after it): {late}"
    assert gone, "a process of the job outlived the contender's grant"


@pytest.mark.parametrize("fault", ["keeper-sigkill", "keeper-sigstop"])
def test_a_job_in_a_group_not_its_own_has_its_children_ended_with_it(
        url: str, key: str, fault: str, tmp_path: Path,
        start_contender: Callable[..., Contender]) -> None:
    """A job that only joined its parent's process group (run by a shell
    script, by cron's shell, by a test runner) cannot have that group
    killed: the death pipes end the job and each process below it that it
    has seen, one by one, when its keeper dies or is stopped."""
    contender = start_contender(url, key, TTL)
    path = tmp_path / "stamps"
    job = Run(tmp_path / "contained.out", url, key, str(path), "--ttl", str(TTL),
              module="tests.keeper.contained_job", own_group=False)
    try:
        keeper = wait_until_kept(job.pid, url, key, int(job.wait_for("held")[1]))
        assert keeper is not None, "the job has no keeper"
        assert os.getpgid(job.pid) != job.pid, "the job must not lead its group here"
        poll(lambda: {"sub", "mp"} <= set(stamps(path)), 30, "the children's stamps", 0.01)
        processes: set[Process] = job.tree()
        job.seen.add(keeper)
        poll(lambda: armed_readers(job.pid) >= 2 + 2 * (len(processes) - 1) or None, 10,
             "each child's death-pipe read ends", 0.01)
        contender.start_now()
        os.kill(keeper[0], signal.SIGKILL if fault == "keeper-sigkill" else signal.SIGSTOP)
        got_at = float(contender.wait_for("granted", 4 * TTL)[2])
        gone, _, late = gone_and_late(processes, path, got_at)
        assert not late, f"stamped after the contender's grant (seconds after it): {late}"
        assert gone, "a process of the job outlived the contender's grant"
    finally:
        job.end()


MANY = """
import os, subprocess, sys, time
from lease_integrations import LeaseLock, connect
url, key, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
with LeaseLock(connect(url), key, ttl=5.0).hold():
    children = [subprocess.Popen(["sleep", "60"]) for _ in range(count)]
    print("started", os.getpid(), flush=True)
    sys.stdin.readline()
    for child in children:
        child.kill()
        child.wait()
"""


def test_the_job_spends_a_bounded_number_of_descriptors_on_its_children(
        url: str, key: str, tmp_path: Path) -> None:
    """Each child (of a job that only joined its group) costs two
    descriptors of the job's own limit: past ``MAX_OWNERS`` children the
    job takes no more, and the keeper's snapshot covers the rest."""
    import subprocess
    import sys

    from lease_integrations.keeper.containment import MAX_OWNERS
    from tests.keeper.keeper_runs import ROOT

    job = subprocess.Popen([sys.executable, "-c", MANY, url, key, str(MAX_OWNERS + 8)],
                           cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout is not None and job.stdin is not None
        pid = int(job.stdout.readline().split()[1])
        cap = 2 + 2 * MAX_OWNERS
        poll(lambda: armed_readers(pid) >= cap or None, 10, "the readers' cap", 0.01)
        most, until = 0, time.monotonic() + 4 * 0.25  # four of the job's looks
        while time.monotonic() < until:
            most = max(most, armed_readers(pid))
        assert most == cap, f"{most} armed read ends for {MAX_OWNERS + 8} children"
        job.stdin.write("done\n")
        job.stdin.flush()
        assert job.wait(30) == 0
    finally:
        job.kill()
        job.wait()


REUSE = """
import json, os, sys
from lease_integrations import LeaseLock, connect
url, key, tmp = sys.argv[1:4]
before = set(os.listdir("/proc/self/fd"))
lock = LeaseLock(connect(url), key, ttl=2.0, on_lost="check")
lease = lock.acquire()
def link(fd):
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""
pipes = sorted(int(fd) for fd in set(os.listdir("/proc/self/fd")) - before
               if link(fd).startswith("pipe:"))
for fd in pipes:
    os.close(fd)
mine = [os.open(f"{tmp}/user-{i}", os.O_RDWR | os.O_CREAT, 0o600) for i in range(len(pipes))]
inodes = [os.fstat(fd).st_ino for fd in mine]
lost = lease.lost.wait(20)
with LeaseLock(lock.store, key + "-next", ttl=2.0).hold():
    pass
intact = []
for fd, ino in zip(mine, inodes):
    try:
        st = os.fstat(fd)
        intact.append(st.st_ino == ino and st.st_size == 0)
    except OSError:
        intact.append(False)
print(json.dumps({"pipes": pipes, "reused": sorted(set(mine) & set(pipes)), "lost": lost,
                  "reason": lease.lost_reason, "intact": intact}))
"""


def test_a_later_hold_leaves_the_users_reused_descriptors_alone(
        url: str, key: str, tmp_path: Path) -> None:
    """The job closes its keeper's pipes behind its back and opens files of
    its own that reuse their numbers: its lease is reported lost (nothing
    renews it), and the next ``hold()``, which starts a new keeper, neither
    closes those files nor writes into them."""
    import json
    import subprocess
    import sys

    from tests.keeper.keeper_runs import ROOT

    done = subprocess.run([sys.executable, "-c", REUSE, url, key, str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    figures(test="reused-fds", store=url.split(":")[0], pipes=len(found["pipes"]),
            reused=len(found["reused"]), lost=found["lost"])
    assert found["reused"], f"the test's files did not reuse the pipes' numbers: {found}"
    assert all(found["intact"]), f"a user's file was closed or written to: {found}"
    assert found["lost"], f"the lease was not reported lost: {found}"

"""``leasectl run -- CMD`` is contained when its keeper cannot help.

``leasectl run`` starts its command in a session (and so a process group)
of its own, so that a terminal's Ctrl-C reaches the command only through
``leasectl``. The death pipes kill the job's own group when the keeper dies
(or is stopped until its timer kills it); the command's group was out of
their reach: ``leasectl`` died, and the command ran on after the next
holder's grant. The command here stamps, and so does a child it started (in
its group); ``leasectl`` runs in a group of its own, as a task runner starts
it. Each test makes one fault, a contender waits for the lease, and the
stamps judge: nothing of the command's tree stamps after the contender's
grant (after a thaw, nothing later than a second after it)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.cli.cli_helpers import poll
from tests.keeper.keeper_observe import Process, alive, gone_and_late, stamps, tree
from tests.keeper.keeper_runs import Contender, Run, figures, wait_until_kept
from tests.keeper.test_keeper_containment import AFTER_THAW

TTL = 5.0
STAMPS_EVERY = 0.02
FAULTS = ["keeper-sigkill", "keeper-sigstop", "suspend", "job-sigkill"]

#: The command: says it holds, starts a child in its own group, and both stamp.
COMMAND = f"""
import os, subprocess, sys, time
path = sys.argv[1]
def stamp(who):
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.write(fd, f"{{who}} {{time.monotonic()}}\\n".encode())
    os.close(fd)
if sys.argv[2] == "cmd":
    subprocess.Popen([sys.executable, "-c", sys.argv[3], path, "child", sys.argv[3]])
    print("held", time.monotonic(), os.environ["LEASE_TOKEN"], os.getpid(), flush=True)
while True:
    stamp(sys.argv[2])
    time.sleep({STAMPS_EVERY})
"""


@pytest.fixture(params=["sqlite", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: os.PathLike[str]) -> str:
    from tests.conftest import store_url_for

    return store_url_for(request, request.param, tmp_path)


@pytest.fixture
def start_run(tmp_path: Path) -> Iterator[Callable[..., Run]]:
    runs: list[Run] = []

    def start(url: str, key: str, path: Path) -> Run:
        run = Run(tmp_path / f"leasectl-{len(runs)}.out", "--url", url, "run", "--key", key,
                  "--ttl", str(TTL), "--", sys.executable, "-c", COMMAND, str(path), "cmd",
                  COMMAND, module="lease_integrations.cli", own_group=True)
        runs.append(run)
        return run

    yield start
    for run in runs:
        run.end()


@pytest.mark.parametrize("fault", FAULTS)
def test_the_commands_group_ends_before_the_contenders_grant(
        url: str, key: str, fault: str, tmp_path: Path, start_run: Callable[..., Run],
        start_contender: Callable[..., Contender]) -> None:
    contender = start_contender(url, key, TTL)
    path = tmp_path / "stamps"
    job = start_run(url, key, path)
    held = job.wait_for("held")
    keeper = wait_until_kept(job.pid, url, key, int(held[1]))
    assert keeper is not None, "leasectl has no keeper"
    poll(lambda: {"cmd", "child"} <= set(stamps(path)), 30, "the command's stamps", 0.01)
    command = int(held[2])
    assert os.getpgid(command) == command != os.getpgid(job.pid), "the command's own group"
    processes: set[Process] = job.tree()
    assert len(processes) >= 3, processes
    contender.start_now()
    thawed = None
    faulted = time.monotonic()
    if fault == "job-sigkill":
        os.kill(job.pid, signal.SIGKILL)
    elif fault == "keeper-sigkill":
        os.kill(keeper[0], signal.SIGKILL)
    elif fault == "keeper-sigstop":
        os.kill(keeper[0], signal.SIGSTOP)
    else:  # a host suspend: everything stopped past the ttl, then resumed
        for group in (job.pid, command):
            os.killpg(group, signal.SIGSTOP)
        os.kill(keeper[0], signal.SIGSTOP)
        time.sleep(TTL + 1.0)  # the suspend's length: a duration, not a synchronisation
        for group in (job.pid, command):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGCONT)
        for process in processes | {keeper}:
            if alive(process):
                os.kill(process[0], signal.SIGCONT)
        thawed = time.monotonic()
    got_at = float(contender.wait_for("granted", 4 * TTL)[2])
    gone, seen, late = gone_and_late(processes, path, got_at)
    job.seen |= tree(command)
    latest = max(seen.values())
    figures(test="run-contained", fault=fault, store=url.split(":")[0],
            fault_to_grant_s=got_at - faulted, last_stamp_before_grant_s=got_at - latest)
    assert not late, f"stamped after the contender's grant (seconds after it): {late}"
    if thawed is not None:
        assert latest <= thawed + AFTER_THAW, f"stamped {latest - thawed:.3f} s after the thaw"
    assert gone, "a process of the run outlived the contender's grant"

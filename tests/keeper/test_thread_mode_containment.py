"""Issue 39, without a keeper: a job whose leases stay in its own process
(``LEASE_KEEPER=off``, as ``memory://`` and a client object the user built
do) still has its process group ended when it dies inside a fail-stop block,
or closes its descriptors, or runs ``exec``: by the kernel, through the
job's own death pipe, with no other process to help.

The job (``contained_job.py``) leads a process group of its own, as task
runners start a task, holds its lease at ttl 5 s and starts a ``subprocess``
child and a ``multiprocessing`` child; all stamp one file. The stamps judge,
as in ``test_keeper_containment``: nothing of the job or its children is
stamped after the contender's grant, and every one of them is gone by then."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli.cli_helpers import poll
from tests.keeper.keeper_observe import Process, armed_readers, cmdline, gone_and_late, stamps
from tests.keeper.keeper_runs import CONTAINED_TTL, Contender, Run, figures

TTL = CONTAINED_TTL


@pytest.fixture(params=["sqlite", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: os.PathLike[str]) -> str:
    from tests.conftest import store_url_for

    return store_url_for(request, request.param, tmp_path)


@pytest.fixture(autouse=True)
def in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Jobs and contenders started from here keep their leases in process."""
    monkeypatch.setenv("LEASE_KEEPER", "off")


@pytest.mark.parametrize("fault", ["job-sigkill", "closerange", "execv"])
def test_the_jobs_group_ends_with_it_without_a_keeper(
        url: str, key: str, fault: str, tmp_path: Path, start_contained: Callable[..., Run],
        start_contender: Callable[..., Contender]) -> None:
    contender = start_contender(url, key, TTL)
    path = tmp_path / "stamps"
    in_job = fault != "job-sigkill"
    job = start_contained(url, key, path, fault if in_job else "none")
    poll(lambda: {"sub", "mp"} <= set(stamps(path)), 30, "both children's stamps", 0.01)
    processes: set[Process] = job.tree()
    assert len(processes) >= 3, processes
    assert not [p for p in processes if "lease_integrations.keeper" in cmdline(p[0])], \
        "the job has a keeper: this test is about the job alone"
    _fault_then_judge(job, in_job, contender, processes, path,
                      test="contained-in-process", fault=fault, store=url.split(":")[0])


def _fault_then_judge(job: Run, in_job: bool, contender: Contender, processes: set[Process],
                      path: Path, **figure: str) -> None:
    """Let the contender wait, fault the job (its own fault, or a SIGKILL
    from here), and judge the stamps against the contender's grant."""
    contender.start_now()
    faulted = time.monotonic()
    if in_job:
        job.go()
    else:
        os.kill(job.pid, signal.SIGKILL)
    got_at = float(contender.wait_for("granted", 4 * TTL)[2])
    gone, seen, late = gone_and_late(processes, path, got_at)
    figures(**figure, fault_to_grant_s=got_at - faulted,
            last_stamp_before_grant_s=got_at - max(seen.values()),
            stampers=",".join(sorted(seen)))
    assert not late, f"stamped after the contender's grant (seconds after it): {late}"
    assert gone, "a process of the job outlived the contender's grant"


@pytest.mark.parametrize("fault", ["job-sigkill", "job-sigkill-hog", "closerange", "execv"])
def test_a_child_in_a_session_of_its_own_ends_with_the_job_without_a_keeper(
        url: str, key: str, fault: str, tmp_path: Path, start_contained: Callable[..., Run],
        start_contender: Callable[..., Contender]) -> None:
    """The job's ``subprocess`` child runs in a session of its own (as
    Airflow's ``SubprocessHook`` starts a command), with a child of its own
    there: a signal to the job's group misses both. With no keeper, the job
    looks below itself while its fail-stop block runs and gives its death
    pipe a read end owned by that group: the kernel ends it with the job.
    "hog": the job holds its low free descriptors, so that read end gets a
    number above the pipe's write end (released first by the kernel)."""
    contender = start_contender(url, key, TTL)
    path = tmp_path / "stamps"
    in_job = not fault.startswith("job-sigkill")
    hog = ("--hog-descriptors", "40") if fault.endswith("-hog") else ()
    job = start_contained(url, key, path, fault if in_job else "none", "--session", *hog)
    poll(lambda: {"sub", "subsub", "mp"} <= set(stamps(path)), 30, "the children's stamps", 0.01)
    processes: set[Process] = job.tree()
    assert len(processes) >= 4, processes
    # Two armed read ends for the job's own group, one more for the child's.
    poll(lambda: armed_readers(job.pid) >= 3 or None, 10, "the child's group contained", 0.01)
    _fault_then_judge(job, in_job, contender, processes, path,
                      test="contained-session-in-process", fault=fault, store=url.split(":")[0])

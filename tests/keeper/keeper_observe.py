"""What the keeper tests observe from outside the job: processes read from
``/proc`` (identified by pid and start time, so a reused pid is never taken
for the old process), the job's output lines, and bounded polls.

Every time here is ``time.monotonic()`` (``CLOCK_MONOTONIC``): one clock for
the whole host, so times taken in the test, the job and the contender compare."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from lease_integrations import LeaseStore
from tests.cli.cli_helpers import poll

#: (pid, start time in clock ticks since boot): a process, safe from pid reuse.
Process = tuple[int, int]
KEEPER_MODULE = "lease_integrations.keeper.process"


def stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, start time) of a process, or None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[1]), int(fields[19])


def alive(process: Process) -> bool:
    """Running or stopped; not a zombie, not gone, not a reused pid."""
    found = stat(process[0])
    return found is not None and found[2] == process[1] and found[0] not in ("Z", "X")


def state(process: Process) -> str | None:
    found = stat(process[0])
    return found[0] if found is not None and found[2] == process[1] else None


def identify(pid: int) -> Process | None:
    found = stat(pid)
    return None if found is None or found[0] in ("Z", "X") else (pid, found[2])


def children(pid: int) -> list[int]:
    """Live processes whose parent is ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            row = stat(int(entry.name))
            if row is not None and row[1] == pid and row[0] not in ("Z", "X"):
                found.append(int(entry.name))
    return found


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
            errors="replace")
    except OSError:
        return ""


def is_keeper(pid: int) -> bool:
    return KEEPER_MODULE in cmdline(pid)


def tree(root: int) -> set[Process]:
    """``root`` and every live process below it, except the keeper (which
    is the job's child, but none of the job's work)."""
    found: set[Process] = set()
    todo = [root]
    while todo:
        pid = todo.pop()
        process = identify(pid)
        if process is None or (pid != root and is_keeper(pid)):
            continue
        found.add(process)
        todo.extend(children(pid))
    return found


def watched(pid: int) -> set[int]:
    """The processes ``pid`` holds a pidfd of (``/proc/PID/fdinfo`` names
    each one's process): a keeper forked from the fork server, no child of
    its job, holds its job's; a server holds none."""
    found: set[int] = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return found
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:[pidfd]":
                found |= {int(line.split()[1]) for line in
                          Path(f"/proc/{pid}/fdinfo/{fd}").read_text().splitlines()
                          if line.startswith("Pid:")}
        except (OSError, ValueError, IndexError):
            continue
    return found


def keepers_of(job_pid: int) -> list[int]:
    """The job's keepers: its children running the keeper module (spawned),
    and keeper processes that watch it (forked by the fork server)."""
    found = [pid for pid in children(job_pid) if is_keeper(pid)]
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) not in found and is_keeper(int(entry.name)) \
                and job_pid in watched(int(entry.name)):
            found.append(int(entry.name))
    return found


def keeper_of(job_pid: int, timeout: float = 20.0) -> Process:
    """The job's keeper (``keepers_of``), once it has one."""
    def find() -> Process | None:
        if identify(job_pid) is None:
            raise AssertionError(f"the job ({job_pid}) is gone")
        for pid in keepers_of(job_pid):
            return identify(pid)
        return None
    return poll(find, timeout, f"a keeper of the job ({job_pid}) running {KEEPER_MODULE}", 0.01)


def has_store_open(pid: int, url: str) -> bool:
    """Whether ``pid`` holds its store open: a socket, or for SQLite the
    database file (a keeper that has one is past its imports and connect)."""
    path = url.split("://", 1)[1].split("?", 1)[0] if url.startswith("sqlite:") else None
    try:
        links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    except OSError:
        return False
    return any(link.startswith("socket:") or (path is not None and link == path)
               for link in links)


def serving_keeper(job_pid: int, url: str, timeout: float) -> Process | None:
    """The job's keeper once it has its store open, or None if there is none
    by ``timeout`` (the code under test has no keeper: the test goes on and
    judges what the job does without one)."""
    def opened() -> bool:
        if identify(job_pid) is None:
            raise AssertionError(f"the job ({job_pid}) is gone")
        return has_store_open(keeper[0], url)

    try:
        keeper = keeper_of(job_pid, timeout)
        poll(opened, timeout, "the keeper to open its store", 0.01)
    except AssertionError:
        return None
    return keeper


def armed_readers(pid: int) -> int:
    """How many of ``pid``'s descriptors are armed death pipes (``O_ASYNC``)."""
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            flags = Path(f"/proc/{pid}/fdinfo/{fd}").read_text().split("flags:")[1].split()[0]
        except (OSError, IndexError):
            continue
        count += bool(int(flags, 8) & os.O_ASYNC)
    return count


def gone_and_late(processes: set[Process], path: Path,
                  granted: float) -> tuple[bool, dict[str, float], dict[str, float]]:
    """After a contender's grant at ``granted``: whether ``processes`` are all
    gone within a second (a survivor gets that long to stamp past the grant,
    so the stamps show it), the latest stamp of each writer in ``path``
    (lines ``WHO MONOTONIC``), and those later than the grant (seconds after it)."""
    try:
        wait_gone(processes, 1.0)
        gone = True
    except AssertionError:
        gone = False
    latest = stamps(path)
    return gone, latest, {who: at - granted for who, at in latest.items() if at >= granted}


def stamps(path: Path) -> dict[str, float]:
    """who -> the latest time it stamped (lines ``WHO MONOTONIC``)."""
    latest: dict[str, float] = {}
    if path.exists():
        for line in path.read_text(errors="replace").splitlines():
            parts = line.split()
            if len(parts) == 2:
                latest[parts[0]] = max(latest.get(parts[0], 0.0), float(parts[1]))
    return latest


def wait_gone(processes: set[Process], timeout: float, every: float = 0.002) -> float:
    """Poll until none of ``processes`` is alive; the monotonic time that was first seen."""
    deadline = time.monotonic() + timeout
    while True:
        now = time.monotonic()
        if not any(alive(p) for p in processes):
            return now
        if now > deadline:
            left = sorted((p, state(p), cmdline(p[0])) for p in processes if alive(p))
            raise AssertionError(f"still alive after {timeout} s: {left}")
        time.sleep(every)


def job_process(processes: set[Process], pid: int) -> Process:
    return next(p for p in processes if p[0] == pid)


def wait_stopped(process: Process, timeout: float = 5.0) -> tuple[float, float]:
    """After SIGSTOP, poll until the kernel shows the process stopped (state
    ``T``): a signal takes effect only once its target is scheduled, late on a
    loaded machine, and the keeper can see the stop only from then. The
    (monotonic, wall) times it was first seen."""
    poll(lambda: state(process) in ("T", "t"), timeout, f"{process} to stop", interval=0.001)
    return time.monotonic(), time.time()


def lines(path: Path) -> dict[str, list[str]]:
    """A job's or contender's output: first word -> the rest of its last such
    line. Complete lines only: one being written may be read half-written."""
    found: dict[str, list[str]] = {}
    if path.exists():
        text = path.read_text(errors="replace")
        for line in text[:text.rfind("\n") + 1].splitlines():
            if line.strip():
                word, *rest = line.split()
                found[word] = rest
    return found


def expires_at(store: LeaseStore, key: str, token: int) -> datetime | None:
    record = store.get(key)
    if record is None or record.token != token or record.holder is None:
        return None
    return record.expires_at


def renewed_by_the_keeper(store: LeaseStore, key: str, token: int) -> None:
    """Wait for one renewal after the grant: the keeper has taken the lease over."""
    first = expires_at(store, key, token)
    poll(lambda: (expires_at(store, key, token) or first) != first, 6.0,
         "a renewal of the lease after its grant", 0.01)


def least_time_to_expiry(store: LeaseStore, key: str, token: int,
                         running: Callable[[], bool]) -> float:
    """The least time to expiry the store showed for the lease (every 50 ms)
    while ``running()``: at or below 0, the store let it expire."""
    least = float("inf")
    while running():
        record = store.get(key)
        if record is not None and record.token == token and record.expires_in is not None:
            least = min(least, record.expires_in)
        time.sleep(0.05)
    return least

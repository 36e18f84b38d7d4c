"""The keeper tests' processes: the job and its contender (``keeper_job.py``)
as real processes whose output goes to a file, and the figures line every
test prints. Also used by the Airflow and Prefect faces' busy-holder tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path

from lease_integrations import connect
from tests.keeper.keeper_observe import (
    Process,
    alive,
    lines,
    poll,
    renewed_by_the_keeper,
    serving_keeper,
    tree,
)

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT = 60.0  # bound on a process start on a loaded machine (never reached when well)
#: The ttl of ``start_contained``'s jobs (``contained_job.py``, conftest).
CONTAINED_TTL = 5.0


def figures(**measured: object) -> None:
    """One ``KEEPER-FIGURES:`` line (``pytest -s | grep KEEPER-FIGURES``)."""
    text = " ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}"
                    for k, v in measured.items())
    print(f"\nKEEPER-FIGURES: {text}", flush=True)


def wait_until_kept(job_pid: int, url: str, key: str, token: int,
                    timeout: float = 20.0) -> Process | None:
    """Wait until the job's keeper has its lease: the keeper has its store open
    and the lease was renewed twice since (by the keeper: the job took it
    only once the keeper had its store open).
    Returns the keeper, or None if there is none (the test goes on and
    judges what the job does without one)."""
    keeper = serving_keeper(job_pid, url, timeout)
    if keeper is not None:
        with connect(url) as store:
            renewed_by_the_keeper(store, key, token)
            renewed_by_the_keeper(store, key, token)
    return keeper


class Run:
    """One process of ``keeper_job.py``; its stdout goes to a file (a pipe
    could fill and block it), read with ``lines``."""

    def __init__(self, out: Path, *args: str, module: str = "tests.keeper.keeper_job",
                 own_group: bool = False) -> None:
        self.out = out
        #: Started in a process group of its own (as task runners start a task):
        #: its group is then ended at teardown too.
        self.own_group = own_group
        with open(out, "wb") as f:
            self.process = subprocess.Popen(
                [sys.executable, "-m", module, *args], stdout=f,
                stdin=subprocess.PIPE, cwd=ROOT, env=os.environ.copy(),
                start_new_session=own_group)
        self.pid = self.process.pid
        self.seen: set[Process] = set()  # every process of it the test saw: ended at teardown

    def lines(self) -> dict[str, list[str]]:
        return lines(self.out)

    def go(self) -> None:
        """The line on stdin the process waits for (``--wait-go``, a contender)."""
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(b"go\n")
            self.process.stdin.flush()
        except BrokenPipeError:
            raise AssertionError(
                f"{self.out.name} ended (status {self.process.wait(10)}) before its work began, "
                f"while it held its lease idle: {self.out.read_text(errors='replace')}") from None

    def go_once_kept(self, url: str, key: str, timeout: float = 20.0) -> Process | None:
        """Let a ``--wait-go`` job start its work once its keeper has the lease
        (``wait_until_kept``). Returns the keeper (None: there is none)."""
        keeper = wait_until_kept(self.pid, url, key, int(self.wait_for("held")[1]), timeout)
        self.go()
        return keeper

    def wait_for(self, word: str, timeout: float = START_TIMEOUT) -> list[str]:
        def seen() -> list[str] | None:
            found = self.lines().get(word)
            if found is None and self.process.poll() is not None:
                found = self.lines().get(word)
                assert found is not None, (
                    f"exited {self.process.returncode} before printing {word!r}: "
                    f"{self.out.read_text(errors='replace')[-2000:]}")
            return found
        return poll(seen, timeout, f"{word!r} from {self.out.name}", 0.01)

    def tree(self) -> set[Process]:
        found = tree(self.pid)
        self.seen |= found
        return found

    def end(self) -> None:
        if self.process.stdin is not None:
            with suppress(OSError):
                self.process.stdin.close()
        if self.process.poll() is None:
            self.seen |= tree(self.pid)
        # Its group, and any group one of its processes leads (a child's
        # session of its own), are ended with it.
        for leader in {self.pid} if self.own_group else set():
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(leader, signal.SIGKILL)
        for process in self.seen:  # only while still the process seen (pids wrap around)
            with suppress(ProcessLookupError, PermissionError):
                if alive(process) and os.getpgid(process[0]) == process[0]:
                    os.killpg(process[0], signal.SIGKILL)
        for process in self.seen:
            if alive(process):
                with suppress(ProcessLookupError):
                    os.kill(process[0], signal.SIGKILL)
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)


class Contender(Run):
    """A contender in another process, trying every 50 ms once ``go()``."""

    def __init__(self, out: Path, url: str, key: str, ttl: float) -> None:
        super().__init__(out, "contend", url, key, "--ttl", str(ttl))

    def start_trying(self, before: float) -> None:
        """Once ready, start trying; fail unless that was before ``before`` (a
        monotonic time): a contender that began later could judge nothing."""
        started = self.start_now()
        assert started < before, "the contender started too late to judge anything"

    def start_now(self) -> float:
        """Once ready, start trying; the monotonic time it was told to. For a
        test whose deadline is known only later: starting before the job's
        work does not leave the start to a poll racing a CPU-bound job."""
        self.wait_for("ready")
        self.go()
        return time.monotonic()

    def grant(self) -> tuple[int, float] | None:
        """(token, time its successful attempt began), or None if never granted."""
        found = self.lines().get("granted")
        return None if found is None else (int(found[0]), float(found[1]))


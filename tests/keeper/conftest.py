"""Fixtures of the keeper tests (issue 31): the job and its contender as real
processes (``keeper_job.py``), the stores they share, and a teardown that
ends, by pid, every process a test started, stopped or not."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from pathlib import Path

import pytest

from tests.conftest import store_url_for
from tests.keeper.keeper_observe import Process, alive, identify, lines, poll, tree

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT = 60.0  # bound on a process start on a loaded machine (never reached when well)


def figures(**measured: object) -> None:
    """One ``KEEPER-FIGURES:`` line (``pytest -s | grep KEEPER-FIGURES``)."""
    text = " ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}"
                    for k, v in measured.items())
    print(f"\nKEEPER-FIGURES: {text}", flush=True)


class Run:
    """One process of ``keeper_job.py``; its stdout goes to a file (a pipe
    could fill and block it), read with ``lines``."""

    def __init__(self, out: Path, *args: str, stdin: int | None = None) -> None:
        self.out = out
        with open(out, "wb") as f:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.keeper.keeper_job", *args], stdout=f,
                stdin=stdin, cwd=ROOT, env=os.environ.copy())
        self.pid = self.process.pid
        self.seen: set[Process] = set()  # every process of it the test saw: ended at teardown

    def lines(self) -> dict[str, list[str]]:
        return lines(self.out)

    def wait_for(self, word: str, timeout: float = START_TIMEOUT) -> list[str]:
        def seen() -> list[str] | None:
            found = self.lines().get(word)
            if found is None and self.process.poll() is not None:
                found = self.lines().get(word)
                assert found is not None, (
                    f"exited {self.process.returncode} before printing {word!r}: "
                    f"{self.out.read_text(errors='replace')[-2000:]}")
            return found
        return poll(seen, timeout, f"{word!r} from {self.out.name}")

    def tree(self) -> set[Process]:
        found = tree(self.pid)
        self.seen |= found
        return found

    def end(self) -> None:
        if self.process.poll() is None:
            self.seen |= tree(self.pid)
        for process in self.seen:
            if alive(process):
                with suppress(ProcessLookupError):
                    os.kill(process[0], signal.SIGKILL)
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)


class Contender(Run):
    """A contender in another process, trying every 50 ms once ``go()``."""

    def go(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(b"go\n")
        self.process.stdin.flush()

    def grant(self) -> tuple[int, float] | None:
        """(token, time its successful attempt began), or None if never granted."""
        found = self.lines().get("granted")
        return None if found is None else (int(found[0]), float(found[1]))

    def end(self) -> None:
        if self.process.stdin is not None:
            with suppress(OSError):
                self.process.stdin.close()
        super().end()


@pytest.fixture(params=["sqlite", "redis", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return store_url_for(request, request.param, tmp_path)


@pytest.fixture
def start_job(tmp_path: Path) -> Iterator[Callable[..., Run]]:
    """``start_job(url, key, *options)``: the job, started and holding its lease
    (its ``held`` line printed); ended at teardown, with everything it started."""
    runs: list[Run] = []

    def start(url: str, key: str, *options: str) -> Run:
        run = Run(tmp_path / f"job-{len(runs)}.out", "hold", url, key, *options)
        runs.append(run)
        run.wait_for("held")
        run.tree()
        return run

    yield start
    for run in runs:
        run.end()


@pytest.fixture
def start_contender(tmp_path: Path) -> Iterator[Callable[..., Contender]]:
    """``start_contender(url, key, ttl)``: a contender starting (it pays its
    imports meanwhile: ``wait_for("ready")`` before ``go()``)."""
    runs: list[Contender] = []

    def start(url: str, key: str, ttl: float = 2.0) -> Contender:
        run = Contender(tmp_path / f"contender-{len(runs)}.out", "contend", url, key,
                        "--ttl", str(ttl), stdin=subprocess.PIPE)
        runs.append(run)
        return run

    yield start
    for run in runs:
        run.end()


def identify_all(pids: list[int]) -> set[Process]:
    return {p for p in map(identify, pids) if p is not None}


def now() -> float:
    return time.monotonic()

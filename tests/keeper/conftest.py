"""Fixtures of the keeper tests (issue 31): the job and its contender as real
processes (``keeper_job.py``, ``keeper_runs.py``), and a teardown that ends,
by pid, every process a test started, stopped or not."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.keeper.keeper_runs import CONTAINED_TTL, Contender, Run


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
def start_contained(tmp_path: Path) -> Iterator[Callable[..., Run]]:
    """``start_contained(url, key, stamps, fault, *options)``: a job leading
    a process group of its own, holding its lease with children stamping
    ``stamps``; ended at teardown, with everything it started."""
    runs: list[Run] = []

    def start(url: str, key: str, stamps: Path, fault: str, *more: str) -> Run:
        run = Run(tmp_path / f"contained-{len(runs)}.out", url, key, str(stamps), "--ttl",
                  str(CONTAINED_TTL), "--fault", fault, *more,
                  module="tests.keeper.contained_job", own_group=True)
        runs.append(run)
        run.wait_for("held")
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
        run = Contender(tmp_path / f"contender-{len(runs)}.out", url, key, ttl)
        runs.append(run)
        return run

    yield start
    for run in runs:
        run.end()

"""``LEASE_KEEPER`` chooses how a job's leases are kept: ``thread`` (what
the docs call thread mode; ``off`` too) keeps them on a thread of the job,
and a value it does not know is an error when the lock is made, naming the
variable, before any lease is taken (a ``ConfigurationError``, a
``ValueError``; ``leasectl`` says it in one line and exits 2). Before,
``thread`` and any typo left the job with a keeper, silently: the one mode
its operator meant to leave."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lease_integrations import connect
from tests.keeper.keeper_runs import ROOT, START_TIMEOUT

JOB = textwrap.dedent("""
    import sys
    from lease_integrations import LeaseLock, connect
    from lease_integrations.keeper.client import get_keeper
    from lease_integrations.keeper.heartbeat import get_heartbeat
    lock = LeaseLock(connect(sys.argv[1]), sys.argv[2], ttl=3)
    with lock.hold() as lease:
        print("heartbeat" if lease in get_heartbeat() else "",
              "keeper" if lease.kept_by is get_keeper() else "", flush=True)
""")


def _job(url: str, key: str, mode: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LEASE_KEEPER": mode, "PYTHONPATH": str(ROOT)}
    env.pop("LEASE_STORE_URL", None)
    return subprocess.run([sys.executable, "-c", JOB, url, key], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=START_TIMEOUT)


@pytest.mark.parametrize("mode", ["thread", " Thread ", "off", "in-process"])
def test_thread_mode_keeps_the_lease_on_a_thread_of_the_job(
        tmp_path: Path, key: str, mode: str) -> None:
    done = _job(f"sqlite://{tmp_path}/leases.db", key, mode)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == "heartbeat ", done.stdout


@pytest.mark.parametrize("mode", ["therad", "of", "kepeer"])
def test_an_unknown_mode_is_an_error_before_any_lease_is_taken(
        tmp_path: Path, key: str, mode: str) -> None:
    url = f"sqlite://{tmp_path}/leases.db"
    done = _job(url, key, mode)
    assert done.returncode != 0, done.stdout
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("lease_integrations.core.errors.ConfigurationError: $LEASE_KEEPER=") \
        and repr(mode) in last, done.stderr
    assert "thread" in last and "fork" in last, last
    assert connect(url).get(key) is None


def test_leasectl_run_says_an_unknown_mode_in_one_line_and_runs_nothing(
        tmp_path: Path, key: str) -> None:
    url = f"sqlite://{tmp_path}/leases.db"
    marker = tmp_path / "ran"
    env = {**os.environ, "LEASE_KEEPER": "therad", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "lease_integrations.cli", "--url", url, "run",
                           "--key", key, "--", "touch", str(marker)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=START_TIMEOUT)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == ("leasectl: $LEASE_KEEPER='therad' is not a keeper mode: use "
                                   "one of fork (the default), spawn, thread (or off)"), done.stderr
    assert not marker.exists() and connect(url).get(key) is None

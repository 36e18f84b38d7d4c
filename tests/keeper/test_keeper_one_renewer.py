"""One renewer for a lease's whole life: a lease of a store the keeper
keeps is taken only once the keeper has the store open, and is renewed by
the keeper alone, never by the job's heartbeat as well. Before, a hold made
while the keeper was still starting was renewed by both until the keeper's
first renewal, and both could give a verdict on it. Each case is a fresh
process with a keeper spawned for it (``LEASE_KEEPER=spawn``: an
interpreter start, the slowest way a keeper comes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.keeper.keeper_runs import ROOT, START_TIMEOUT

JOB = textwrap.dedent("""
    import sys
    from lease_integrations import LeaseLock, connect
    from lease_integrations.keeper.client import get_keeper
    from lease_integrations.keeper.heartbeat import get_heartbeat
    lock = LeaseLock(connect(sys.argv[1]), sys.argv[2], ttl=3)
    for _ in range(2):  # the first hold meets a keeper that is starting
        with lock.hold() as lease:
            print("heartbeat" if lease in get_heartbeat() else "",
                  "keeper" if lease.kept_by is get_keeper() else "", flush=True)
""")


@pytest.fixture(params=["sqlite", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    from tests.conftest import store_url_for

    return store_url_for(request, request.param, tmp_path)


def test_a_lease_has_the_keeper_as_its_only_renewer_from_the_first_hold(
        url: str, key: str) -> None:
    env = {**os.environ, "LEASE_KEEPER": "spawn", "PYTHONPATH": str(ROOT)}
    env.pop("LEASE_STORE_URL", None)
    done = subprocess.run([sys.executable, "-c", JOB, url, key], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=START_TIMEOUT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == [" keeper", " keeper"], done.stdout


LATE_ENVIRONMENT = textwrap.dedent("""
    import ctypes, json, os, sys
    from lease_integrations import LeaseLock, connect
    sqlite_url, s3_url, key, aws = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    with LeaseLock(connect(sqlite_url), key, ttl=3).hold():  # the keeper starts without AWS_*
        pass
    os.environ.update(aws)  # as a job that reads its settings late sets them
    with LeaseLock(connect(s3_url), key, ttl=3).hold() as lease:
        # Two ttls in one call that keeps the GIL: only a keeper that has
        # the bucket open keeps the lease through it (else: exit 75).
        ctypes.PyDLL(None).sleep(6)
    print("held through", flush=True)
""")


def test_a_store_is_opened_with_the_environment_the_job_has_when_it_makes_the_lock(
        s3_url: str, key: str, tmp_path: Path) -> None:
    """A keeper started for one store opens a later one with the job's
    environment as it is then (the S3 endpoint and credentials come from
    AWS_* variables): before, it kept the one it started with, could not
    open the bucket, and the lease was renewed by the job's heartbeat only,
    which a call that keeps the GIL starves."""
    aws = {name: os.environ[name] for name in os.environ if name.startswith("AWS_")}
    env = {name: value for name, value in os.environ.items() if not name.startswith("AWS_")}
    env.update(LEASE_KEEPER="spawn", PYTHONPATH=str(ROOT))
    env.pop("LEASE_STORE_URL", None)
    done = subprocess.run(
        [sys.executable, "-c", LATE_ENVIRONMENT, f"sqlite:///{tmp_path}/leases.db", s3_url, key,
         json.dumps(aws)], env=env, cwd=ROOT, capture_output=True, text=True,
        timeout=START_TIMEOUT)
    assert (done.returncode, done.stdout.strip()) == (0, "held through"), done.stderr

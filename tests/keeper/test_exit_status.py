"""``keeper.exit_status``: a stop hook that reported the outcome itself
picks the status the fail-stop ladder exits with (Airflow 3's supervisor
counts a failure the task reported only from a process that exits 0).
Through the real ladder: a process holds a lease, the lease is broken, the
process's status is read; with the keeper and with the renewer in a thread."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from lease_integrations import LEASE_LOST_EXIT_STATUS, connect
from lease_integrations.keeper import exit_status

JOB = textwrap.dedent("""
    import sys, threading
    from lease_integrations import LeaseLock, connect
    from lease_integrations.keeper import exit_status, stop_hook

    url, key, status = sys.argv[1], sys.argv[2], sys.argv[3]
    hook = (lambda: exit_status(int(status))) if status != "-" else (lambda: None)
    with LeaseLock(connect(url), key, ttl=2.0).hold() as lease, stop_hook(hook):
        print("held", lease.token, flush=True)
        threading.Event().wait(60)
    print("block-ended", flush=True)
""")


def _run(tmp_path: Path, status: str, keeper: str) -> tuple[int, str]:
    url, key = f"sqlite://{tmp_path}/leases.db", "exit-status"
    job = subprocess.Popen([sys.executable, "-c", JOB, url, key, status], text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           env={**os.environ, "LEASE_KEEPER": keeper})
    try:
        assert job.stdout is not None
        first = job.stdout.readline()
        assert first.startswith("held"), first + job.stdout.read()
        with connect(url) as store:
            assert store.force_release(key, by="test") is not None
        code = job.wait(20)
        return code, job.stdout.read()
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()


@pytest.mark.parametrize("keeper", ["on", "off"])
@pytest.mark.parametrize("chosen", ["-", "0", "3"])
def test_the_ladder_exits_with_the_status_a_stop_hook_chose(tmp_path: Path, keeper: str,
                                                            chosen: str) -> None:
    started = time.monotonic()
    code, output = _run(tmp_path, chosen, keeper)
    expected = LEASE_LOST_EXIT_STATUS if chosen == "-" else int(chosen)
    assert code == expected, output
    assert "block-ended" not in output, output
    assert time.monotonic() - started < 20


def test_exit_status_reads_without_changing_and_refuses_what_no_exit_can_be() -> None:
    assert exit_status() == LEASE_LOST_EXIT_STATUS  # nothing chose: the loss's own status
    for bad in (-1, 256, True, 1.0, "0"):
        with pytest.raises(ValueError):
            exit_status(bad)  # type: ignore[arg-type]
    assert exit_status() == LEASE_LOST_EXIT_STATUS

"""A group the job no longer needs to contain is let go of twice, by the
job's look below itself (the group ended) and by the ``contain`` block that
registered it (``leasectl run``, as its command ends). The second must close
nothing: closing every end instead closed the job's own death pipe while it
was armed, and the kernel SIGKILLed the job (found in CI: ``leasectl run``
exited -9 after forwarding a SIGTERM, about one run in 25)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

JOB = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    from lease_integrations import LeaseLock, connect
    from lease_integrations.keeper.client import contain
    from tests.keeper.keeper_observe import armed_readers

    store = connect(sys.argv[1])
    with LeaseLock(store, sys.argv[2], ttl=30).hold():
        mine = armed_readers(os.getpid())  # the job's own two death pipes
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                                 start_new_session=True)
        with contain(store, child.pid):
            assert armed_readers(os.getpid()) == mine + 2, "the group got no read ends"
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            # The job's look below itself (every quarter second) lets go first.
            deadline = time.monotonic() + 10
            while armed_readers(os.getpid()) > mine:
                assert time.monotonic() < deadline, "the ended group was never let go of"
                time.sleep(0.01)
        print("block ended, armed:", armed_readers(os.getpid()), flush=True)
    print("released", flush=True)
""")


def test_a_group_let_go_of_twice_leaves_the_jobs_own_death_pipes_alone(
        tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("LEASE_KEEPER", "LEASE_STORE_URL")}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-c", JOB, f"sqlite://{tmp_path}/leases.db",
                           "owner-let-go"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    assert done.stdout.splitlines() == ["block ended, armed: 2", "released"], done.stdout

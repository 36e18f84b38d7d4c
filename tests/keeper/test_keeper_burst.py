"""A burst of holders must not starve its own renewals (issue 39): 32
healthy processes take a lease each at the same moment (ttl 6) beside two
processes that keep both cores busy, and hold it for 2.5 ttls. Each starts
its keeper (an interpreter and the store's driver) while the host is at its
busiest; none may lose its lease (exit 75). On SQLite and Redis.
``benchmarks/keeper_burst.py`` runs the same burst several times with the
keeper on and off and measures the memory."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lease_integrations import LEASE_LOST_EXIT_STATUS
from tests.conftest import store_url_for

HOLDERS = 32
TTL = 6.0
ROOT = Path(__file__).resolve().parents[2]

HOLDER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from lease_integrations import LeaseLock, connect
    url, key, ready, ttl = sys.argv[1:5]
    with LeaseLock(connect(url), key, ttl=float(ttl)).hold():
        Path(ready).touch()
        sys.stdin.read()  # held until the test closes our stdin
""")


@pytest.fixture(params=["sqlite", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return store_url_for(request, request.param, tmp_path)


@pytest.fixture
def two_busy_cores() -> Iterator[None]:
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    yield
    for process in busy:
        process.kill()
        process.wait()


def test_a_burst_of_holders_loses_no_lease(url: str, key: str, tmp_path: Path,
                                           two_busy_cores: None) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("LEASE_STORE_URL", "LEASE_KEEPER")}
    readies = [tmp_path / f"ready-{i}" for i in range(HOLDERS)]
    holders = [subprocess.Popen([sys.executable, "-c", HOLDER, url, f"{key}-{i}", str(ready),
                                 str(TTL)], stdin=subprocess.PIPE, stderr=subprocess.PIPE,
                                cwd=ROOT, env=env) for i, ready in enumerate(readies)]
    try:
        started = time.monotonic()
        while not all(r.exists() or h.poll() is not None for r, h in zip(readies, holders)):
            assert time.monotonic() - started < 120, "the holders did not all start in 120 s"
            time.sleep(0.05)
        held_at = time.monotonic()
        # Held for 2.5 ttls from the last grant: every lease renewed twice at least.
        while time.monotonic() - held_at < 2.5 * TTL and all(h.poll() is None for h in holders):
            time.sleep(0.1)
        for h in holders:
            if h.poll() is None:
                assert h.stdin is not None
                h.stdin.close()
        codes = [h.wait(timeout=60) for h in holders]
        lost = [(i, h.stderr.read().decode(errors="replace")[-300:] if h.stderr else "")
                for i, (h, c) in enumerate(zip(holders, codes)) if c == LEASE_LOST_EXIT_STATUS]
        print(f"\nburst on {url.split(':')[0]}: {HOLDERS} holders all held after "
              f"{held_at - started:.1f} s; lost {len(lost)}")
        assert lost == [], lost
        assert codes == [0] * HOLDERS, codes
    finally:
        for h in holders:
            if h.poll() is None:
                h.kill()
                h.wait()

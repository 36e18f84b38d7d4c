"""A randomised soak: several workers contend for one key while the injector
kills, pauses and (networked stores) cuts them, at random but reproducibly.

LEASE_SOAK_SECONDS sets the budget per store (default 8 s in the test
command; try 60), LEASE_SOAK_SEED the seed (printed on every run)."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from conftest import record
from harness import Scenario
from proxy import FaultProxy
from test_faults import _through

TTL = 2.0
WORKERS = 4


@pytest.fixture
def soak(shared_store_url: str, tmp_path: Path):  # type: ignore[no-untyped-def]
    run = Scenario(tmp_path, shared_store_url, "soak")
    run.start_sampling()
    yield run
    run.close()


def test_randomised_soak(soak: Scenario) -> None:
    seconds = float(os.environ.get("LEASE_SOAK_SECONDS", "8"))
    seed = int(os.environ.get("LEASE_SOAK_SEED", str(random.randrange(1_000_000))))
    rng = random.Random(seed)
    networked = urlsplit(soak.url).scheme != "sqlite"
    proxy = FaultProxy(*_target(soak.url)) if networked else None
    url = _through(proxy, soak.url) if proxy else soak.url
    alive: list[str] = []
    spawned = 0
    faults = {"kill": 0, "pause": 0, "cut": 0}

    def spawn() -> None:
        nonlocal spawned
        name = f"w{spawned}"
        spawned += 1
        soak.spawn(name, url=url, ttl=TTL, wait=30, grants=10_000, seconds=seconds + 30,
                   hold=round(rng.uniform(0.05, 0.3), 3), writes=rng.randint(1, 4),
                   policy=rng.choice(["exit", "check"]))
        alive.append(name)

    try:
        for _ in range(WORKERS):
            spawn()
        # the fault clock starts once every worker runs (imports are slow on a busy machine)
        soak.wait_for(lambda events: sum(e["ev"] == "started" for e in events) >= WORKERS, 120,
                      "every worker to start")
        stop_at = time.monotonic() + seconds
        while time.monotonic() < stop_at:
            time.sleep(rng.uniform(0.2, 0.8))  # the time between faults is the soak's own dice
            action = rng.choice(["kill", "pause", "cut"] if proxy else ["kill", "pause"])
            victim = rng.choice(alive)
            if action == "kill":
                soak.kill(victim)
                alive.remove(victim)
                spawn()
            elif action == "pause":
                resume_at = time.monotonic() + rng.uniform(0.5, 2.5) * TTL
                soak.pause(victim, until=lambda at=resume_at: time.monotonic() >= at, timeout=10 * TTL)
            elif proxy is not None:
                # A reset is not a partition: the store reconnects inside the
                # trust window, so it may explain no overlap (logged, not excused).
                proxy.cut()
                soak.log.write("reset")
            faults[action] += 1
        for name in list(alive):
            soak.kill(name)
    finally:
        if proxy:
            proxy.close()
    verdict = soak.verdict()
    print(f"\nsoak [{soak.url.split(':')[0]}] seed={seed} {seconds:g}s faults={faults}: {verdict.summary()}")
    assert not verdict.violations, (seed, verdict.violations)
    assert len(verdict.grants) > WORKERS, "the soak made too little progress to mean anything"
    record(soak.url, f"soak {seconds:g}s seed {seed} ({sum(faults.values())} faults)", verdict)


def _target(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    assert parts.hostname and parts.port
    return parts.hostname, parts.port

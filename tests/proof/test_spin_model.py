"""The lease protocol's SPIN model (proof/lease.pml): the model must verify,
and every mutant of it must yield a counterexample trail.

Two configurations of the one model keep the search small: ``clocks``
(drift, pauses, fail-stop; no store faults, 7 ticks) and ``faults`` (one
break, data loss or failover; 5 ticks). See docs/concepts/proof.md.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

MODEL = Path(__file__).resolve().parents[2] / "proof" / "lease.pml"
CONFIGS = {
    "clocks": ["-DHORIZON=7", "-DMAXFAULTS=0"],
    "faults": ["-DHORIZON=5", "-DMAXFAULTS=1"],
}
#: mutant macro -> the configuration that exposes it
MUTANTS = {
    "MUTANT_NO_MARGIN": "clocks",
    "MUTANT_REPLY_TIME": "clocks",
    "MUTANT_NO_SECRET": "clocks",
    "MUTANT_SLOW_STOP": "clocks",
    "MUTANT_NO_FLOOR": "faults",
}
#: exhaustive search (-DSAFETY: assertions and end states), memory bounded
CC_FLAGS = ["-O1", "-DSAFETY", "-DVECTORSZ=256", "-DMEMLIM=1024"]


def _tools() -> None:
    missing = [tool for tool in ("spin", "cc") if shutil.which(tool) is None]
    if missing:
        why = f"{' and '.join(missing)} not installed (scripts/envs.sh ensure_spin)"
        if os.environ.get("LEASE_TEST_REQUIRE_ALL") == "1":
            pytest.fail(why)
        pytest.skip(why)


def _verify(tmp_path: Path, defines: list[str]) -> tuple[int, int, float, str]:
    """spin -a, cc, ./pan: (errors, states stored, seconds, pan's output)."""
    _tools()
    t0 = time.monotonic()
    subprocess.run(["spin", "-a", *defines, str(MODEL)], cwd=tmp_path, check=True,
                   capture_output=True, text=True, timeout=60)
    subprocess.run(["cc", *CC_FLAGS, "-o", "pan", "pan.c"], cwd=tmp_path, check=True,
                   capture_output=True, text=True, timeout=120)
    run = subprocess.run(["./pan", "-m1000000"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    elapsed = time.monotonic() - t0
    out = run.stdout + run.stderr
    errors = re.search(r"errors: (\d+)", out)
    states = re.search(r"(\d+) states, stored", out)
    assert errors and states, f"pan gave no verdict:\n{out}"
    return int(errors.group(1)), int(states.group(1)), elapsed, out


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_model_verifies(tmp_path: Path, config: str) -> None:
    errors, states, elapsed, out = _verify(tmp_path, CONFIGS[config])
    print(f"\nlease.pml [{config}]: {states} states, {errors} errors, {elapsed:.1f} s")
    assert "Full statespace search" in out
    assert "out of memory" not in out and "max search depth too small" not in out, out
    assert errors == 0, out


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_mutant_has_counterexample(tmp_path: Path, mutant: str) -> None:
    defines = [*CONFIGS[MUTANTS[mutant]], f"-D{mutant}"]
    errors, states, elapsed, out = _verify(tmp_path, defines)
    violated = re.search(r"pan:\d+: (.*?) \(at depth", out)
    print(f"\nlease.pml {mutant}: {states} states, {errors} errors, {elapsed:.1f} s: "
          f"{violated.group(1) if violated else '?'}")
    assert errors >= 1, out
    assert list(tmp_path.glob("*.trail")), "no counterexample trail written"

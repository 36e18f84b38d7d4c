"""The lease protocol's SPIN model (proof/lease.pml): the model must verify,
and every mutant of it must yield a counterexample trail that breaks the
property the mutant is about.

Three configurations of the one model keep the search small: ``clocks``
(drift, pauses, the keeper's stop; no store faults, 7 ticks), ``faults``
(one break, conditional break, data loss or failover; 4 ticks) and
``supersede`` (one supersede, with drift and pauses; 5 ticks). Mutants are
searched breadth-first, so each trail is a shortest one; the test prints it
as one line (the model's printf events). See docs/concepts/proof.md.
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
    "faults": ["-DHORIZON=4", "-DMAXFAULTS=1"],
    "supersede": ["-DHORIZON=5", "-DMAXFAULTS=0", "-DMAXSUP=1"],
}
#: mutant defines -> (the configuration that exposes it, the property it breaks)
MUTANTS = {
    "MUTANT_NO_MARGIN": ("clocks", "P4"),
    "MUTANT_REPLY_TIME": ("clocks", "P4"),
    "MUTANT_NO_SECRET": ("clocks", "P4"),
    "MUTANT_SLOW_STOP": ("clocks", "P4"),
    "MUTANT_NO_STOP": ("clocks", "P4"),
    "MUTANT_LATE_STOP": ("clocks", "P4"),
    "MUTANT_DRIFT_BEYOND": ("clocks", "P4"),
    "MUTANT_NO_LATE_GRANT_CHECK": ("clocks", "P4"),
    "MUTANT_GRANT_REPLY_TIME": ("clocks", "P4"),
    "MUTANT_NO_FLOOR": ("faults", "P1"),
    "MUTANT_NO_FLOOR,NO_P1": ("faults", "P2"),
    "MUTANT_COARSE_FLOOR": ("faults", "P1"),
    "MUTANT_RELEASE_ERROR_OK": ("faults", "P5"),
    "MUTANT_KEEP_NO_CONFIRM": ("faults", "P5"),
    "MUTANT_BREAK_NO_TOKEN": ("faults", "P6"),
    "MUTANT_SUPERSEDE_NO_WAIT": ("supersede", "P7"),
    "MUTANT_SUPERSEDE_SHORT_WAIT": ("supersede", "P7"),
}
#: the text pan prints for each property's assertion -> its name
PROPERTY_OF = {
    "htok[i]>maxg": "P1",
    ">=fep": "P2",
    "cut[0]))||cut[1]": "P3",
    "&&gone[0])": "P4",
    "!(ok)||": "P5",
    "badbreak": "P6",
    "supv[": "P7",
}
#: exhaustive search (-DSAFETY: assertions and end states), memory bounded
CC_FLAGS = ["-DSAFETY", "-DVECTORSZ=256", "-DMEMLIM=1024"]
#: the protocol's searches are large (optimise); a mutant's breadth-first
#: search (a shortest trail) is small, where compiling costs more than searching
PROTOCOL_CC, MUTANT_CC = ["-O1", *CC_FLAGS], ["-O0", "-DBFS", *CC_FLAGS]


def _tools() -> None:
    missing = [tool for tool in ("spin", "cc") if shutil.which(tool) is None]
    if missing:
        why = f"{' and '.join(missing)} not installed (scripts/envs.sh ensure_spin)"
        if os.environ.get("LEASE_TEST_REQUIRE_ALL") == "1":
            pytest.fail(why)
        pytest.skip(why)


def _verify(tmp_path: Path, defines: list[str], bfs: bool = False) -> tuple[int, int, float, str]:
    """spin -a, cc, ./pan: (errors, states stored, seconds, pan's output)."""
    _tools()
    t0 = time.monotonic()
    shutil.copy(MODEL, tmp_path / MODEL.name)  # spin -t finds the trail beside the model
    subprocess.run(["spin", "-a", *defines, MODEL.name], cwd=tmp_path, check=True,
                   capture_output=True, text=True, timeout=60)
    subprocess.run(["cc", *(MUTANT_CC if bfs else PROTOCOL_CC), "-o", "pan", "pan.c"],
                   cwd=tmp_path, check=True,
                   capture_output=True, text=True, timeout=120)
    run = subprocess.run(["./pan", "-m1000000"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    elapsed = time.monotonic() - t0
    out = run.stdout + run.stderr
    errors = re.search(r"errors: (\d+)", out)
    states = re.search(r"(\d+) states, stored", out)
    assert errors and states, f"pan gave no verdict:\n{out}"
    return int(errors.group(1)), int(states.group(1)), elapsed, out


def _trail_line(tmp_path: Path, defines: list[str]) -> str:
    """Replay the trail (spin -t): the model's printf events, on one line."""
    replay = subprocess.run(["spin", "-t", *defines, MODEL.name], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    events = [line.split("spin:")[0] for line in replay.stdout.splitlines() if "|" in line]
    return " ".join(" ".join(events).split()).rstrip(" |")


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_model_verifies(tmp_path: Path, config: str) -> None:
    errors, states, elapsed, out = _verify(tmp_path, CONFIGS[config])
    print(f"\nlease.pml [{config}]: {states} states, {errors} errors, {elapsed:.1f} s")
    assert "Full statespace search" in out
    assert "out of memory" not in out and "max search depth too small" not in out, out
    assert errors == 0, out


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_mutant_has_counterexample(tmp_path: Path, mutant: str) -> None:
    config, prop = MUTANTS[mutant]
    defines = [*CONFIGS[config], *(f"-D{d}" for d in mutant.split(","))]
    errors, states, elapsed, out = _verify(tmp_path, defines, bfs=True)
    assert errors >= 1, out
    assert list(tmp_path.glob("*.trail")), "no counterexample trail written"
    violated = re.search(r"assertion violated (.*?) \(at depth", out)
    assert violated, out
    broken = [name for text, name in PROPERTY_OF.items() if text in violated.group(1)]
    print(f"\nlease.pml {mutant}: {states} states, {elapsed:.1f} s, {broken}: "
          f"{_trail_line(tmp_path, defines)}")
    assert broken == [prop], f"{mutant} broke {broken} ({violated.group(1)}), not {prop}"

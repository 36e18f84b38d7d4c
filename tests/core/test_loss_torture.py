"""The seeded loss-injection torture (tests/core/loss_torture.py) in a child
process per store: the child's exit code proves no process death, its report
lists every broken rule. Set LEASE_TORTURE_SEED to replay a run."""

from __future__ import annotations

import ast
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import store_url_for
from tests.core.loss_torture import ENDINGS

ROOT = Path(__file__).resolve().parents[2]
BLOCKS = 1200  # per store; about 15 s on a quiet two-core host
SECONDS = 60.0  # the bound on a crawling host (it then fails the count below)


@pytest.fixture(params=["memory", "sqlite", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: os.PathLike[str]) -> str:
    return store_url_for(request, request.param, tmp_path)


def test_loss_injection_torture(url: str) -> None:
    seed = int(os.environ.get("LEASE_TORTURE_SEED") or random.randrange(1 << 31))
    print(f"loss torture seed {seed} (replay: LEASE_TORTURE_SEED={seed})")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), *sys.path]))
    child = subprocess.run(
        [sys.executable, "-m", "tests.core.loss_torture", url, "--seed", str(seed),
         "--blocks", str(BLOCKS), "--seconds", str(SECONDS)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=SECONDS + 60,
    )
    print(child.stdout)
    assert child.returncode == 0, f"seed {seed}: exit {child.returncode}\n{child.stdout}" \
                                  f"\n{child.stderr[-3000:]}"
    counts = ast.literal_eval(child.stdout.split("counts ", 1)[1].splitlines()[0])
    assert sum(v for k, v in counts.items() if k in ENDINGS) >= BLOCKS

"""``./run demo`` (``python -m lease_integrations.demo``) end to end, in a
temporary directory of its own: it shows the overlap refused, the takeover
after a SIGKILL and the history, and leaves no ``lease-demo-*`` folder behind
(each run used to leave one); ``--keep`` keeps it and says where."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def start(tmp: Path, *args: str) -> subprocess.Popen[str]:
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    env.pop("LEASE_STORE_URL", None)
    return subprocess.Popen([sys.executable, "-m", "lease_integrations.demo", *args], env=env,
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)


def test_the_demo_cleans_up_after_itself_unless_told_to_keep(tmp_path: Path) -> None:
    plain, kept = tmp_path / "plain", tmp_path / "kept"
    runs = [start(plain), start(kept, "--keep")]  # side by side: each waits out a ttl
    (out, err), (kept_out, kept_err) = (run.communicate(timeout=120) for run in runs)
    assert [run.returncode for run in runs] == [0, 0], err + kept_err

    assert "not started: lease 'nightly-billing' is held" in out
    assert "EXPIRED:" in out and "until taken over by #" in out  # the history, printed
    assert list(plain.iterdir()) == []
    assert "Removed the demo's folder" in out

    [folder] = kept.iterdir()
    assert folder.name.startswith("lease-demo-") and (folder / "leases.db").is_file()
    assert f"Kept {folder} (--keep)" in kept_out

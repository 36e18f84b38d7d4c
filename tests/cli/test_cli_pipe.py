"""``leasectl ... | head -1``: a reader that stops early closes the pipe, and
leasectl ends the way Unix tools do (as if by SIGPIPE): quietly, status 141,
no traceback, no "Exception ignored" on stderr."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from cli_helpers import COMMAND

from lease_integrations import connect

ROWS = 3000  # ~300 KB of table: far more than a pipe buffer holds


def test_a_reader_that_closes_the_pipe_early_ends_leasectl_quietly(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}/leases.db"
    with connect(url) as store:
        for i in range(ROWS):
            assert store.acquire(f"pipe/{i:05d}", f"worker-{i}:{i}:0123456789abcdef", "s", 600,
                                 {"dag_id": "billing", "run_id": f"manual__{i}"}).granted
    env = {k: v for k, v in os.environ.items() if k != "LEASE_STORE_URL"}
    for args in (("list", "pipe/"), ("list", "pipe/", "--json")):
        proc = subprocess.Popen([*COMMAND, "--url", url, *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env)
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.readline()  # what `head -1` reads, then it exits
        proc.stdout.close()
        err = proc.stderr.read().decode()
        code = proc.wait(timeout=120)
        assert first, "leasectl printed nothing"
        assert code == 141, (args, code, err)
        assert err == "", err


def test_head_in_a_shell_pipeline(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}/leases.db"
    with connect(url) as store:
        for i in range(ROWS):
            assert store.acquire(f"pipe/{i:05d}", f"w{i}", "s", 600, {}).granted
    env = {k: v for k, v in os.environ.items() if k != "LEASE_STORE_URL"}
    command = " ".join(f"'{part}'" for part in COMMAND)
    proc = subprocess.run(["bash", "-c", f"{command} --url '{url}' list pipe/ | head -1; "
                           'echo "status=${PIPESTATUS[0]}" >&2'],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.stdout.startswith(f"{ROWS} lease(s) with prefix 'pipe/'"), proc.stdout
    assert proc.stderr.strip() == "status=141", proc.stderr

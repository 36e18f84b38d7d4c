"""leasectl finds the store through a Prefect LeaseStoreBlock, the way flows
with ``store="block:NAME"`` do: the real console script, a real block saved
on the session's Prefect server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

from lease_integrations import LeaseLock, connect
from lease_integrations.prefect.block import LeaseStoreBlock

LEASECTL = Path(sys.executable).with_name("leasectl")


def leasectl(prefect_api: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PREFECT_API_URL": prefect_api}
    env.pop("LEASE_STORE_URL", None)
    return subprocess.run([str(LEASECTL), *args], capture_output=True, text=True, env=env,
                          timeout=120)


def test_list_reads_the_store_named_by_a_block(prefect_api: str, tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}/leases.db"
    name = f"leases-{uuid.uuid4().hex[:8]}"
    LeaseStoreBlock(url=url).save(name)
    store = connect(url)
    with LeaseLock(store, "billing-acme", ttl=30).hold() as lease:
        done = leasectl(prefect_api, "--prefect-block", name, "--json", "list")
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)
    leases = listed["leases"] if isinstance(listed, dict) else listed
    assert [(r["key"], r["token"], r["holder"]) for r in leases] == [
        ("billing-acme", lease.token, lease.holder)]


def test_an_unknown_block_is_a_usage_error_naming_it(prefect_api: str) -> None:
    done = leasectl(prefect_api, "--prefect-block", "no-such-block-here", "list")
    assert done.returncode == 2
    assert "no-such-block-here" in done.stderr


def test_block_and_url_together_are_refused(prefect_api: str, tmp_path: Path) -> None:
    done = leasectl(prefect_api, "--prefect-block", "x", "--url", f"sqlite://{tmp_path}/l.db", "list")
    assert done.returncode == 2 and "only one of" in done.stderr

"""``leasectl`` on the bucket store: list, show, history, break and check
read and change ``s3://`` leases like any other store's, and the history
checker judges an s3 history (a clean one, and a stale fenced write)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from lease_integrations import connect


def leasectl(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "LEASE_STORE_URL"}
    return subprocess.run([sys.executable, "-m", "lease_integrations.cli", *args],
                          capture_output=True, text=True, env=env, timeout=120)


def test_leasectl_reads_breaks_and_checks_bucket_store_leases(s3_url: str, tmp_path: Path) -> None:
    with connect(s3_url) as store:
        first = store.acquire("billing", "alice", "secret-a", 30.0, {"dag_id": "billing"}).record
        assert first is not None and store.release("billing", "secret-a", first.token)
        second = store.acquire("billing", "bob", "secret-b", 30.0, {"dag_id": "billing"}).record
        assert second is not None
        assert store.acquire("other", "carol", "secret-c", 30.0, {}).granted

    listed = leasectl("--url", s3_url, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    leases = {r["key"]: r for r in json.loads(listed.stdout)["leases"]}
    assert sorted(leases) == ["billing", "other"]
    assert (leases["billing"]["holder"], leases["billing"]["token"]) == ("bob", second.token)
    assert leases["billing"]["state"] == "held"

    shown = leasectl("--url", s3_url, "show", "billing")
    assert shown.returncode == 0 and "bob" in shown.stdout and "secret-b" not in shown.stdout

    checked = leasectl("--url", s3_url, "check", "billing", "--ttl", "30")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "2 grant(s)" in checked.stdout
    writes = tmp_path / "writes.jsonl"
    writes.write_text("".join(json.dumps({"token": t, "accepted": True}) + "\n"
                              for t in (first.token, second.token, first.token)))
    stale = leasectl("--url", s3_url, "check", "billing", "--writes", str(writes))
    assert stale.returncode == 7 and "[stale-write]" in stale.stdout, stale.stdout

    broke = leasectl("--url", s3_url, "break", "billing", "--yes", "--by", "oncall",
                     "--token", str(second.token))
    assert broke.returncode == 0, broke.stderr
    history = json.loads(leasectl("--url", s3_url, "history", "billing", "--json").stdout)
    assert [(e["kind"], e["token"]) for e in history["events"]] == [
        ("acquired", first.token), ("released", first.token),
        ("acquired", second.token), ("broken", second.token)]
    with connect(s3_url) as store:
        record = store.get("billing")
        assert record is not None and record.state == "released"

"""Eight processes hammer one key; every grant writes through the fence.

Asserts: no two grants overlap in time, tokens strictly increase in grant
order (and are never issued twice), and the fenced ledger never accepted a
token older than one it had already accepted. These are judged by the public
history checker (``lease_integrations.core.checker``), the module users run
on their own histories, on the workers' grants and the ledger, and on the
store's own history of the key."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from lease_integrations import SqlFence, connect
from lease_integrations.core.checker import FencedWrite, Hold, check_history
from lease_integrations.core.store import HISTORY_LIMIT

WORKERS = 8
GRANTS_EACH = 40
WORKER = Path(__file__).with_name("race_worker.py")


def test_many_processes_never_overlap_and_stale_writes_are_refused(
    shared_store_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = f"race-{uuid.uuid4().hex[:10]}"
    ledger_path = tmp_path / "ledger.db"
    with sqlite3.connect(ledger_path) as ledger:
        ledger.execute("PRAGMA journal_mode=WAL")
        ledger.execute("CREATE TABLE ledger (id INTEGER PRIMARY KEY AUTOINCREMENT, token INT, pid INT)")
        SqlFence().create_table(ledger)
    go = tmp_path / "go"
    outs = [tmp_path / f"worker-{i}.jsonl" for i in range(WORKERS)]
    procs = [
        subprocess.Popen([sys.executable, str(WORKER), "--url", shared_store_url, "--key", key,
                          "--ledger", str(ledger_path), "--out", str(out), "--go", str(go),
                          "--grants", str(GRANTS_EACH), "--seconds", "200"])
        for out in outs
    ]
    go.touch()
    try:
        for proc in procs:
            assert proc.wait(timeout=240) == 0
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()

    events = [json.loads(line) for out in outs for line in out.read_text().splitlines()]
    grants = sorted((e for e in events if e["event"] == "grant"), key=lambda e: e["start"])
    lost = [e for e in events if e["event"] == "lost"]

    tokens = [g["token"] for g in grants]
    with sqlite3.connect(ledger_path) as ledger:
        written = [row[0] for row in ledger.execute("SELECT token FROM ledger ORDER BY id")]
    # The workers' grants as holds (CLOCK_MONOTONIC ns, one host), the ledger's
    # accepted writes in the order it accepted them (a late write accepted
    # after a newer token would be a stale write), and the late writes it refused.
    holds = [Hold(g["token"], g["start"], g["end"], f"pid {g['pid']}") for g in grants]
    writes = [FencedWrite(t, True) for t in written] + [
        FencedWrite(g["stale_token"], False) for g in grants if g["stale_accepted"] is False]
    report = check_history(holds=holds, writes=writes)
    overlaps = report.rule("overlap")
    out_of_order = report.rule("token-order")
    regressions = report.rule("stale-write")
    # The store's own history of the key (its newest events), as a user would check it.
    with connect(shared_store_url) as store:
        store_report = check_history(
            store.history(key, HISTORY_LIMIT), [FencedWrite(t, True) for t in written],
            ttl=5.0, drift=0.05, key=key, history_limit=HISTORY_LIMIT)
    stale_tried = [g for g in grants if g["stale_token"] is not None]
    stale_rejected = sum(1 for g in stale_tried if g["stale_accepted"] is False)

    with capsys.disabled():
        print(f"\nrace [{shared_store_url.split(':')[0]}]: {WORKERS} processes, {len(grants)} grants, "
              f"{len(overlaps)} overlaps, {len(out_of_order)} token order violations, "
              f"{stale_rejected} of {len(stale_tried)} late writes refused by the fence, "
              f"{len(regressions)} fence regressions, {len(lost)} leases lost")

    assert len(grants) == WORKERS * GRANTS_EACH
    assert not overlaps, overlaps[:3]
    assert not out_of_order, out_of_order[:3]
    assert len(set(tokens)) == len(tokens)
    assert all(g["accepted"] for g in grants), "a current holder's write was refused"
    assert not regressions, regressions[:3]
    assert stale_rejected > 0, "the race never exercised the fence"
    assert not lost
    assert report.ok, str(report)
    assert store_report.ok, str(store_report)

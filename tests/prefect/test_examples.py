"""The example flows run as written (against the test's Prefect server and
a SQLite lease store from ``LEASE_STORE_URL``)."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import pytest

from lease_integrations import LeaseLock, StaleToken, connect

sys.path.insert(0, str(Path(__file__).parents[2] / "example_flows"))

import fenced_export
import fenced_write
import nightly_batch
import per_tenant

pytestmark = pytest.mark.usefixtures("prefect_api")


def test_nightly_batch_runs_once_and_skips_an_overlapping_run(lease_url: str) -> None:
    assert nightly_batch.nightly_billing() == 3
    with LeaseLock(connect(lease_url), "nightly-billing", ttl=5).hold() as scheduled_run:
        manual = nightly_batch.nightly_billing(return_state=True)
    assert manual.is_cancelled() and scheduled_run.holder in (manual.message or "")


def test_per_tenant_leases(lease_url: str) -> None:
    results = per_tenant.bill_everyone(["acme", "globex"])
    assert "billing-acme token 1" in results[0] and "billing-globex token 1" in results[1]


def test_fenced_write_refuses_a_stale_token(lease_url: str, tmp_path: Path) -> None:
    db = str(tmp_path / "ledger.db")
    first = fenced_write.write_ledger(db)
    second = fenced_write.write_ledger(db)
    assert second > first  # tokens rise (floored by the store's clock, not +1)
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    with pytest.raises(StaleToken):  # the first run's holder waking up late
        fenced_write.FENCE.check(conn, "ledger", first)
    conn.execute("ROLLBACK")
    assert conn.execute("SELECT token FROM ledger ORDER BY token").fetchall() == [(first,),
                                                                                  (second,)]


def test_fenced_export_publishes_its_output_for_its_token(lease_url: str, s3_url: str) -> None:
    from lease_integrations.core.fencing import FencedOutput, ObjectFence

    first = fenced_export.export_billing(s3_url)
    second = fenced_export.export_billing(s3_url)
    assert second > first
    output = ObjectFence(s3_url).read()
    assert output == FencedOutput(second, {"billing.csv": b"customer,amount\nacme,120\nglobex,80\n",
                                           "_SUCCESS": f"token {second}\n".encode()})
    with pytest.raises(StaleToken):  # the first run's holder waking up late
        ObjectFence(s3_url).commit(first, {"billing.csv": b"stale"})
    assert ObjectFence(s3_url).read() == output

"""``key="billing-{tenant}"``: two tenants run side by side, two runs for
the same tenant contend (three child processes started together)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect_helpers import entered, release, wait_until


def test_tenants_run_side_by_side_same_tenant_contends(spawn: Any, coord: Path) -> None:
    acme_1 = spawn("tenant_billing", tenant="acme")
    acme_2 = spawn("tenant_billing", tenant="acme")
    globex = spawn("tenant_billing", tenant="globex", dry_run=True)

    skipped = wait_until(lambda: [c for c in (acme_1, acme_2) if c.done()], 90,
                         "one acme run to be skipped")
    inside = wait_until(lambda: len(entered(coord)) == 2 and entered(coord), 90,
                        "one acme and the globex run to be inside together")
    assert sorted(body["label"] for body in inside) == ["acme", "globex"]
    assert sorted(body["key"] for body in inside) == ["billing-acme", "billing-globex"]
    # Side by side: one of the two entered while the other was inside.
    assert any(body["others_inside"] for body in inside)

    assert len(skipped) == 1
    result = skipped[0].result()
    assert result["type"] == "CANCELLED"
    acme_holder = next(body for body in inside if body["label"] == "acme")
    assert "billing-acme" in result["message"] and acme_holder["run"] in result["message"]

    release(coord)
    runners = [c for c in (acme_1, acme_2) if c is not skipped[0]] + [globex]
    assert [c.result()["type"] for c in runners] == ["COMPLETED", "COMPLETED"]
    assert len(entered(coord)) == 2

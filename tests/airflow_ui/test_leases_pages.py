"""The page renderers alone (no server): what a holder writes into its meta
ends up escaped in the HTML, the DAG tab carries no script, and links into
the Airflow UI are relative."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from lease_integrations.airflow.ui import pages
from lease_integrations.airflow.ui.links import airflow_link
from lease_integrations.airflow.ui.store_source import StoreSource
from lease_integrations.core import LeaseRecord

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)
SOURCE = StoreSource("Airflow Connection 'lease_default'", "redis://:***@cache:6379/0", False)
HOSTILE = '<img src=x onerror="alert(1)">'


def record(key: str = "nightly-billing", **meta: object) -> LeaseRecord:
    return LeaseRecord(key=key, holder="worker-3:4121:5f1c0a9e2b7d4c61", token=7,
                       acquired_at=NOW - timedelta(seconds=90), renewed_at=NOW,
                       expires_at=NOW + timedelta(seconds=20), observed_at=NOW, meta=dict(meta))


def test_meta_from_the_holder_is_escaped_everywhere() -> None:
    r = record(dag_id=HOSTILE, run_id="r&<1>", task_id="t")
    html = (pages.leases_page([r], SOURCE, HOSTILE, can_break=True, user=HOSTILE)
            + pages.history_page(HOSTILE, r, [], SOURCE, can_break=True)
            + pages.dag_page(HOSTILE, [r], SOURCE)
            + pages.confirm_page(r, "1.abc", SOURCE))
    assert HOSTILE not in html and "<img" not in html
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in html


def test_the_dag_tab_has_no_script_and_the_store_url_stays_masked() -> None:
    html = pages.dag_page("billing", [record(dag_id="billing")], SOURCE)
    assert "<script" not in html
    assert "redis://:***@cache:6379/0" in html
    assert "<script" in pages.leases_page([], SOURCE, "", can_break=False, user="viewer")


def test_links_into_airflow_are_relative_and_quoted() -> None:
    meta = {"dag_id": "billing", "run_id": "scheduled__2026-11-30T02:00:00+00:00",
            "task_id": "charge/cards", "map_index": 3}
    assert airflow_link(meta) == ("../dags/billing/runs/scheduled__2026-11-30T02%3A00%3A00%2B00%3A00"
                                  "/tasks/charge%2Fcards/mapped/3")
    assert airflow_link({"dag_id": "billing", "run_id": "live"}) == "../dags/billing/runs/live"
    assert airflow_link({"flow_run_id": "x"}) is None
    assert 'href="../dags/billing/runs/live" data-top' in pages.leases_page(
        [record(dag_id="billing", run_id="live")], SOURCE, "", can_break=False, user="viewer")


def test_the_break_button_shows_only_to_those_who_may_break() -> None:
    r = record(dag_id="billing")
    assert "Break…" in pages.leases_page([r], SOURCE, "", can_break=True, user="admin")
    assert "Break…" not in pages.leases_page([r], SOURCE, "", can_break=False, user="viewer")

"""The page renderers alone (no server): what a holder writes into its meta
ends up escaped in the HTML, the DAG tab carries no script, and links into
the Airflow UI are relative."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from lease_integrations import connect
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
    assert "&lt;img src=x onerror=&#34;alert(1)&#34;&gt;" in html  # markupsafe spells " as &#34;


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


def test_unreadable_and_invisible_text_is_shown_escaped_and_the_pages_encode() -> None:
    """issue 24 items 5 and 6: a lone surrogate in stored meta (any store
    client can write one) made every page and JSON route a 500; bidi and
    other invisible characters reached the page raw."""
    from lease_integrations.airflow.ui.app import AsciiJSONResponse
    from lease_integrations.console.render import record_json

    r = record(dag_id="d\ud800x", run_id="r\u202e\u061c", task_id="t\U000e0041\u00ad")
    html = (pages.leases_page([r], SOURCE, "p\udfff", can_break=True, user="admin")
            + pages.history_page(r.key, r, [], SOURCE, can_break=True)
            + pages.dag_page("d\ud800x", [r], SOURCE)
            + pages.confirm_page(r, "1.abc", SOURCE)
            + pages.message_page("Error 503", "lease store error: d\ud800x"))
    html.encode("utf-8")  # raised UnicodeEncodeError: the 500
    for raw in ("\ud800", "\udfff", "\u202e", "\u061c", "\U000e0041", "\u00ad"):
        assert raw not in html, ascii(raw)
    assert "d\\ud800x" in html and "r\\u202e\\u061c" in html and "\\U000e0041\\xad" in html

    body = AsciiJSONResponse({"leases": [record_json(r)]}).body
    assert json.loads(body)["leases"][0]["meta"]["dag_id"] == "d\ud800x"  # exact in JSON


def test_the_history_page_shows_an_expiry_takeover(tmp_path: Path) -> None:
    """Events from a real store: a holder that crashed and was taken over
    after its ttl reads as such on the page, not as two plain grants."""
    store = connect(f"sqlite://{tmp_path}/leases.db")
    try:
        first = store.acquire("billing", "crashed-host:7:00000000000000aa", "s1", 0.3, {}).record
        assert first is not None
        deadline = time.monotonic() + 10
        while not store.acquire("billing", "worker-2:9:00000000000000bb", "s2", 30, {}).granted:
            assert time.monotonic() < deadline, "the crashed holder's lease never expired"
            time.sleep(0.05)
        html = pages.history_page("billing", store.get("billing"), store.history("billing"),
                                  SOURCE, can_break=False)
    finally:
        store.close()
    assert (f"took over #{first.token} of crashed-host:7:00000000000000aa "
            "(expired, never released)") in html

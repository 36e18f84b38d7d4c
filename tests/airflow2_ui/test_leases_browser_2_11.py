"""A real browser (Debian's headless ``chromium``) signs in to the Airflow
2.11 UI, opens Browse -> Leases, finds the held key inside Airflow's own
layout, and walks a break through the confirm page. The screenshot is kept
as a test artifact (``$LEASE_TEST_ARTIFACTS``, default
``.lease-test-servers/artifacts``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from cdp import ARTIFACTS, Browser, open_browser
from ui_flow_2_11 import PAGE_TEXT, click, open_leases, sign_in
from webserver2 import Webserver2

from lease_integrations import LeaseStore


@pytest.fixture
def browser() -> Iterator[Browser]:
    with open_browser() as b:
        yield b


def test_a_breaker_finds_the_key_under_browse_leases_and_breaks_it(
        webserver: Webserver2, browser: Browser, store: LeaseStore, key: str) -> None:
    # A row as a scheduled task writes it: a long key, run id and holder name.
    key = f"airflow/billing/charge_customers_for_every_region-{key}"
    taken = store.acquire(key, "worker-7:311:00000000000000c1", "s3cret", 600,
                          {"dag_id": "billing", "run_id": "scheduled__2026-12-04T02:00:00+00:00",
                           "task_id": "charge_customers_for_every_region", "try_number": 1,
                           "host": "airflow-worker-7.prod.example.internal", "pid": 311})
    assert taken.granted and taken.record is not None
    sign_in(browser, webserver.base, "breaker", webserver.passwords["breaker"])
    text = open_leases(browser, key)
    assert "worker-7:311:00000000000000c1" in text and "held" in text
    assert browser.evaluate("location.pathname") == "/leases/"
    # Airflow's own navigation bar is around the page.
    assert browser.evaluate("!!document.querySelector('.navbar')")

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "leases-page-2.11.png"
    browser.screenshot(shot)
    print(f"\nscreenshot: {shot}")
    assert shot.stat().st_size > 10_000

    # At the browser's 1,400 px the Break… button is on screen, not pushed past the edge.
    overflow = browser.evaluate(
        "document.querySelector('.lease-page a.danger').getBoundingClientRect().right"
        " - document.documentElement.clientWidth")
    assert overflow <= 0, f"the Break… button ends {overflow} px past the window's edge"
    click(browser, "document.querySelector('.lease-page a.danger')", "the Break… button")
    browser.wait_for(f"{PAGE_TEXT}.includes('Break token {taken.record.token} now')", "the confirm page")
    click(browser, "document.querySelector('.lease-page button.danger')", "the confirm button")
    browser.wait_for(f"{PAGE_TEXT}.includes('recorded as broken by')", "the break's result")
    record = store.get(key)
    assert record is not None and record.holder is None

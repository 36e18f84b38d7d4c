"""A real browser (Debian's headless ``chromium``) signs in to the Airflow UI,
opens Browse -> Leases, and finds the held key in the page the plugin renders
inside the UI's iframe. The screenshot is kept as a test artifact
(``$LEASE_TEST_ARTIFACTS``, default ``.lease-test-servers/artifacts``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from api_server import ApiServer
from cdp import ARTIFACTS, Browser, open_browser
from conftest import Holder
from ui_flow import open_leases, sign_in


@pytest.fixture
def browser() -> Iterator[Browser]:
    with open_browser() as b:
        yield b


def test_a_signed_in_user_finds_the_held_key_under_browse_leases(
        api_server: ApiServer, browser: Browser, holder: Holder) -> None:
    sign_in(browser, api_server.base, "viewer", api_server.passwords["viewer"])
    text = open_leases(browser, holder.key)
    assert holder.name in text and "held" in text
    assert browser.evaluate("location.pathname").startswith("/plugin/leases")

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "leases-page.png"
    browser.screenshot(shot)
    print(f"\nscreenshot: {shot}")
    assert shot.stat().st_size > 10_000

    # The holder's meta links to its DAG run, opened by the UI itself (the
    # iframe's sandbox forbids navigating the window; the page hands the
    # path to the UI's router instead of showing the UI inside its frame).
    link = "document.querySelector('iframe').contentDocument.querySelector('td.meta a[data-top]')"
    browser.evaluate(f"setTimeout(() => {link}.click(), 0); true")  # the click unmounts the frame
    browser.wait_for("location.pathname === '/dags/billing/runs/live'", "the DAG run page")

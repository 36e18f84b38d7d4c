"""A real browser (Debian's headless ``chromium``) signs in to the Airflow UI,
opens Browse -> Leases, and finds the held key in the page the plugin renders
inside the UI's iframe. The screenshot is kept as a test artifact
(``$LEASE_TEST_ARTIFACTS``, default ``.lease-test-servers/artifacts``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from api_server import ROOT, ApiServer, free_port
from cdp import Browser, chromium_binary
from conftest import Holder

ARTIFACTS = Path(os.environ.get("LEASE_TEST_ARTIFACTS") or ROOT / ".lease-test-servers" / "artifacts")
FRAME_TEXT = "(document.querySelector('iframe')?.contentDocument?.body?.innerText || '')"


@pytest.fixture
def browser() -> Iterator[Browser]:
    binary = chromium_binary()
    if binary is None:
        message = "chromium is not installed (scripts/envs.sh ensure_browser installs it)"
        if os.environ.get("LEASE_TEST_REQUIRE_ALL") == "1":
            pytest.fail(message)
        pytest.skip(message)
    b = Browser(binary, free_port())
    try:
        b.call("Page.enable")
        yield b
    finally:
        b.close()


def click(browser: Browser, selector_js: str, what: str) -> None:
    browser.wait_for(f"!!({selector_js})", what)
    browser.evaluate(f"({selector_js}).click()")


def test_a_signed_in_user_finds_the_held_key_under_browse_leases(
        api_server: ApiServer, browser: Browser, holder: Holder) -> None:
    browser.navigate(api_server.base + "/")
    browser.wait_for("!!document.querySelector('input[name=password]')", "the login form")
    for name, value in (("username", "viewer"), ("password", api_server.passwords["viewer"])):
        browser.evaluate(f"document.querySelector('input[name={name}]').focus()")
        browser.call("Input.insertText", text=value)  # typed, so React sees it
    click(browser, "document.querySelector('button[type=submit]')", "the sign-in button")
    browser.wait_for("!location.pathname.startsWith('/auth')", "the sign-in to finish")

    click(browser, "document.querySelector('button[aria-label=Browse]')", "the Browse menu")
    click(browser, "[...document.querySelectorAll('[role=menuitem]')]"
                   ".find(e => e.textContent.trim() === 'Leases')", "Browse -> Leases")
    text = browser.wait_for(f"{FRAME_TEXT}.includes({holder.key!r}) && {FRAME_TEXT}",
                            "the held key in the Leases page")
    assert holder.name in text and "held" in text
    assert browser.evaluate("location.pathname").startswith("/plugin/leases")

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "leases-page.png"
    browser.screenshot(shot)
    print(f"\nscreenshot: {shot}")
    assert shot.stat().st_size > 10_000

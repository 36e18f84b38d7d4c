"""What a person does in the Airflow UI to reach the Leases page: sign in
through SimpleAuthManager's form, then Browse -> Leases. Shared by the browser
test and the docs screenshot."""

from __future__ import annotations

from cdp import Browser

#: The text of the plugin's page, rendered in the UI's iframe.
FRAME_TEXT = "(document.querySelector('iframe')?.contentDocument?.body?.innerText || '')"


def click(browser: Browser, selector_js: str, what: str) -> None:
    browser.wait_for(f"!!({selector_js})", what)
    browser.evaluate(f"({selector_js}).click()")


def sign_in(browser: Browser, base: str, user: str, password: str) -> None:
    browser.navigate(base + "/")
    browser.wait_for("!!document.querySelector('input[name=password]')", "the login form")
    for name, value in (("username", user), ("password", password)):
        browser.evaluate(f"document.querySelector('input[name={name}]').focus()")
        browser.call("Input.insertText", text=value)  # typed, so React sees it
    click(browser, "document.querySelector('button[type=submit]')", "the sign-in button")
    browser.wait_for("!location.pathname.startsWith('/auth')", "the sign-in to finish")


def open_leases(browser: Browser, expect: str) -> str:
    """Browse -> Leases; returns the page text once it shows ``expect``."""
    click(browser, "document.querySelector('button[aria-label=Browse]')", "the Browse menu")
    click(browser, "[...document.querySelectorAll('[role=menuitem]')]"
                   ".find(e => e.textContent.trim() === 'Leases')", "Browse -> Leases")
    text: str = browser.wait_for(f"{FRAME_TEXT}.includes({expect!r}) && {FRAME_TEXT}",
                                 f"{expect!r} in the Leases page")
    return text

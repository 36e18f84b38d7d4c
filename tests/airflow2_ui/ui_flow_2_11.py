"""What a person does in the Airflow 2.11 UI to reach the Leases page: sign
in through FAB's login form, then Browse -> Leases. Shared by the browser
test and the docs screenshot."""

from __future__ import annotations

from cdp import Browser

PAGE_TEXT = "(document.querySelector('.lease-page')?.innerText || '')"


def click(browser: Browser, selector_js: str, what: str) -> None:
    browser.wait_for(f"!!({selector_js})", what)
    browser.evaluate(f"({selector_js}).click()")


def sign_in(browser: Browser, base: str, user: str, password: str) -> None:
    browser.navigate(base + "/login/")
    browser.wait_for("!!document.querySelector('input[name=password]')", "the login form")
    for name, value in (("username", user), ("password", password)):
        browser.evaluate(f"document.querySelector('input[name={name}]').focus()")
        browser.call("Input.insertText", text=value)
    click(browser, "document.querySelector('input[type=submit], button[type=submit]')",
          "the sign-in button")
    browser.wait_for("document.readyState === 'complete' && !location.pathname.startsWith('/login')",
                     "the sign-in to finish")


def open_leases(browser: Browser, expect: str) -> str:
    """Browse -> Leases from the navigation bar; returns the page text once it
    shows ``expect``."""
    click(browser, "[...document.querySelectorAll('a.dropdown-toggle')]"
                   ".find(e => e.textContent.trim().startsWith('Browse'))", "the Browse menu")
    click(browser, "[...document.querySelectorAll('ul.dropdown-menu a')]"
                   ".find(e => e.textContent.trim() === 'Leases')", "Browse -> Leases")
    text: str = browser.wait_for(f"{PAGE_TEXT}.includes({expect!r}) && {PAGE_TEXT}",
                                 f"{expect!r} in the Leases page")
    return text

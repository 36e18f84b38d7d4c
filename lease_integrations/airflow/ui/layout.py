"""The frame every page shares: one inline stylesheet, no scripts.

The UI shows the page in an iframe whose sandbox blocks dialogs (and on DAG
tabs blocks scripts altogether), so everything is plain HTML and forms. The
colours follow ``prefers-color-scheme`` so the page stays readable beside the
UI in light and dark mode.
"""

from __future__ import annotations

import html
from typing import Any

from lease_integrations.console.render import meta_summary
from lease_integrations.core import printable

from .links import airflow_link, prefect_link

STYLE = """
:root { color-scheme: light dark; --bg: #ffffff; --fg: #1a202c; --muted: #5a6578;
  --line: #d9dee7; --head: #f1f4f8; --link: #1d5fbf; --held: #1c7c3a; --expired: #a15c00;
  --released: #5a6578; --danger: #b42318; --danger-fg: #ffffff; --note: #fff7e0; }
@media (prefers-color-scheme: dark) {
  :root { --bg: #14171c; --fg: #e6e9ef; --muted: #9aa4b5; --line: #323844; --head: #1d222a;
    --link: #7fb2ff; --held: #5fd383; --expired: #f0b35a; --released: #9aa4b5;
    --danger: #f0665a; --danger-fg: #14171c; --note: #2f2a1a; }
}
body { background: var(--bg); color: var(--fg); margin: 1rem 1.25rem;
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
h1 { font-size: 1.35rem; margin: 0 0 .25rem; } h2 { font-size: 1.1rem; margin: 1.25rem 0 .5rem; }
a { color: var(--link); } .muted { color: var(--muted); }
code, .mono { font-family: ui-monospace, monospace; }
table { border-collapse: collapse; width: 100%; margin-top: .5rem; }
th, td { text-align: left; padding: .35rem .6rem; border-bottom: 1px solid var(--line); vertical-align: top; }
th { background: var(--head); font-weight: 600; white-space: nowrap; }
td { white-space: nowrap; } td.meta { white-space: normal; min-width: 16rem; }
.state-held, .state-acquired { color: var(--held); font-weight: 600; }
.state-expired { color: var(--expired); font-weight: 600; }
.state-released { color: var(--released); }
.state-broken, .state-lost { color: var(--danger); }
form.filter { margin: .75rem 0; display: flex; gap: .5rem; align-items: center; }
input[type=text] { padding: .3rem .5rem; border: 1px solid var(--line); border-radius: 4px;
  background: var(--bg); color: var(--fg); min-width: 16rem; }
button, .button { padding: .3rem .8rem; border: 1px solid var(--line); border-radius: 4px;
  background: var(--head); color: var(--fg); cursor: pointer; text-decoration: none; font: inherit; }
button.danger, a.danger { background: var(--danger); border-color: var(--danger); color: var(--danger-fg); }
.note { background: var(--note); border: 1px solid var(--line); border-radius: 4px;
  padding: .5rem .75rem; margin: .75rem 0; }
"""


#: Links into the Airflow UI (``data-top``) should open in the UI itself, not
#: inside the page's iframe, whose sandbox forbids navigating the window. Where
#: scripts may run (the Browse page), this hands the path to the UI's router
#: through the parent's history; elsewhere the plain link still works, framed.
TOP_LINKS = """
document.addEventListener("click", function (event) {
  var a = event.target.closest ? event.target.closest("a[data-top]") : null;
  if (!a || window.top === window) { return; }
  try {
    var url = new URL(a.getAttribute("href"), window.location.href);
    window.top.history.pushState(null, "", url.pathname + url.search + url.hash);
    window.top.dispatchEvent(new PopStateEvent("popstate"));
    event.preventDefault();
  } catch (error) { /* another origin or blocked: follow the link in the frame */ }
});
"""


def escape(value: object) -> str:
    """Text for the page: invisible, bidi and unencodable characters shown as
    escapes by the core's one rule (a lone surrogate in stored meta cannot be
    encoded into the response at all: it made every page a 500), then
    HTML-escaped."""
    return html.escape(printable(value))


def page(title: str, body: str, *, store: str = "", scripts: bool = True) -> str:
    """A whole page; ``scripts=False`` for the DAG tab, whose iframe may run none."""
    footer = f'<p class="muted">Store: <code>{escape(store)}</code></p>' if store else ""
    return (
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        f"<title>{escape(title)}</title><style>{STYLE}</style></head>"
        f"<body>{body}{footer}" + (f"<script>{TOP_LINKS}</script>" if scripts else "")
        + "</body></html>"
    )


def state_cell(state: str) -> str:
    return f'<span class="state-{escape(state)}">{escape(state)}</span>'


def meta_cell(meta: dict[str, Any], up: str = "../") -> str:
    """The holder's job in a few words, linked to where it runs."""
    if not meta:
        return '<span class="muted">-</span>'
    text = escape(meta_summary(meta) or ", ".join(f"{k}={v}" for k, v in sorted(meta.items())))
    href = airflow_link(meta, up) or prefect_link(meta)
    if not href:
        return text
    top = " data-top" if href.startswith(up) else ""
    return f'<a href="{escape(href)}"{top}>{text}</a>'


def link(href: str, text: str, cls: str = "") -> str:
    klass = f' class="{cls}"' if cls else ""
    return f'<a href="{escape(href)}"{klass}>{escape(text)}</a>'

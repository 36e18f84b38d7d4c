"""The templates every face renders, and what they share: one stylesheet, one
script, and one Jinja2 environment.

Airflow 3 shows a page in an iframe whose sandbox blocks dialogs (and on DAG
tabs blocks scripts altogether), so everything is plain HTML and forms; the
colours follow ``prefers-color-scheme`` so the page stays readable beside the
UI in light and dark mode. Airflow 2.11 shows the same content inside its own
Flask layout, so every rule is scoped to ``.lease-page`` and leaves the
navigation bar alone (``.lease-light`` keeps it light, as that UI is).

Escaping holds by construction: autoescape is on for every template, and the
environment's ``finalize`` first passes every value through the core's
``printable`` (invisible, bidi and unencodable characters as escapes: a lone
surrogate in stored meta cannot be encoded into a response at all).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from lease_integrations.console.render import (
    clock,
    event_detail,
    expires_text,
    held_for,
    meta_summary,
    span,
)
from lease_integrations.core import printable

STYLE = """
.lease-page { --bg: #ffffff; --fg: #1a202c; --muted: #5a6578;
  --line: #d9dee7; --head: #f1f4f8; --link: #1d5fbf; --held: #1c7c3a; --expired: #a15c00;
  --released: #5a6578; --danger: #b42318; --danger-fg: #ffffff; --note: #fff7e0;
  background: var(--bg); color: var(--fg);
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
@media (prefers-color-scheme: dark) {
  .lease-page:not(.lease-light) { color-scheme: dark; --bg: #14171c; --fg: #e6e9ef; --muted: #9aa4b5;
    --line: #323844; --head: #1d222a; --link: #7fb2ff; --held: #5fd383; --expired: #f0b35a;
    --released: #9aa4b5; --danger: #f0665a; --danger-fg: #14171c; --note: #2f2a1a; }
}
body.lease-page { margin: 1em 1.25em; }
.lease-page h1 { font-size: 1.55em; margin: 0 0 .25em; }
.lease-page h2 { font-size: 1.25em; margin: 1.25em 0 .5em; }
.lease-page a { color: var(--link); } .lease-page .muted { color: var(--muted); }
.lease-page code, .lease-page .mono { font-family: ui-monospace, monospace; background: none;
  color: inherit; padding: 0; }
.lease-page table { border-collapse: collapse; width: 100%; margin-top: .5em; }
.lease-page th, .lease-page td { text-align: left; padding: .35em .6em;
  border-bottom: 1px solid var(--line); vertical-align: top; }
.lease-page th { background: var(--head); font-weight: 600; white-space: nowrap; }
.lease-page td { white-space: nowrap; } .lease-page td.meta { white-space: normal; min-width: 12em; }
.lease-page td.wrap { white-space: normal; overflow-wrap: anywhere; min-width: 8em; }
.lease-page .state-held, .lease-page .state-acquired { color: var(--held); font-weight: 600; }
.lease-page .state-expired { color: var(--expired); font-weight: 600; }
.lease-page .state-released { color: var(--released); }
.lease-page .state-broken, .lease-page .state-lost { color: var(--danger); }
.lease-page form.filter { margin: .75em 0; display: flex; gap: .5em; align-items: center; }
.lease-page input[type=text] { padding: .3em .5em; border: 1px solid var(--line); border-radius: 4px;
  background: var(--bg); color: var(--fg); min-width: 16em; }
.lease-page button, .lease-page .button { padding: .3em .8em; border: 1px solid var(--line);
  border-radius: 4px; background: var(--head); color: var(--fg); cursor: pointer;
  text-decoration: none; font: inherit; }
.lease-page button.danger, .lease-page a.danger { background: var(--danger); border-color: var(--danger);
  color: var(--danger-fg); }
.lease-page .note { background: var(--note); border: 1px solid var(--line); border-radius: 4px;
  padding: .5em .75em; margin: .75em 0; }
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

#: The frame a face renders its content into: the whole page (Airflow 3), or
#: the content alone, for Airflow 2's layout to wrap (``templates/flask``).
STANDALONE = "standalone.html"
FRAGMENT = "fragment.html"


def _finalize(value: Any) -> Any:
    """Every ``{{ value }}``: made printable unless it is already markup
    (a macro's output, the page's own stylesheet and script); autoescape
    then HTML-escapes what this returns."""
    if isinstance(value, Markup):
        return value
    return printable(value)


def query(path: str, **params: str) -> str:
    return f"{path}?{urlencode(params)}"


def meta_text(meta: dict[str, Any]) -> str:
    """The holder's job in a few words."""
    return meta_summary(meta) or ", ".join(f"{k}={v}" for k, v in sorted(meta.items()))


ENV = Environment(loader=PackageLoader("lease_integrations.airflow.ui", "templates"),
                  autoescape=select_autoescape(default=True, default_for_string=True),
                  finalize=_finalize, undefined=StrictUndefined)
ENV.globals.update(q=query, span=span, held_for=held_for, expires_text=expires_text, clock=clock,
                   event_detail=event_detail, meta_text=meta_text)
ENV.filters["pyrepr"] = repr


def render(template: str, *, frame: str, title: str, store: str = "", scripts: bool = True,
           **context: Any) -> str:
    """One page: ``template`` in ``frame`` (``STANDALONE`` or ``FRAGMENT``).
    ``scripts=False`` for the DAG tab, whose iframe may run none."""
    html: str = ENV.get_template(template).render(
        frame=frame, title=title, store=store, style=Markup(STYLE),
        script=Markup(TOP_LINKS) if scripts else "", **context)
    return html

"""The HTML pages: lease table, per-key history, break confirmation and
result, and the DAG tab. Pure functions from records to HTML, every value
escaped (``layout.escape``: unreadable characters as escapes, then HTML);
all links relative (the pages sit one level below the base URL)."""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlencode

from lease_integrations.console.render import clock, event_detail, expires_text, held_for, span
from lease_integrations.core import LeaseEvent, LeaseRecord

from .layout import escape, link, meta_cell, page, state_cell
from .store_source import StoreSource

HEADERS = ("Key", "State", "Holder", "Token", "Held for", "Expires in", "Held by")


def _q(path: str, **params: str) -> str:
    return f"{path}?{urlencode(params)}"


def _rows(records: Sequence[LeaseRecord], *, can_break: bool, up: str) -> str:
    rows = []
    for r in records:
        live = r.holder is not None
        action = link(_q("break", key=r.key), "Break…", "button danger") if can_break and live else ""
        rows.append(
            "<tr>"
            f"<td class=\"mono\">{link(_q('history', key=r.key), r.key)}</td>"
            f"<td>{state_cell(r.state)}</td>"
            f"<td class=\"mono\">{escape(r.holder or '-')}</td>"
            f"<td class=\"mono\">{r.token}</td>"
            f"<td>{escape(span(held_for(r)))}</td>"
            f"<td>{escape(expires_text(r))}</td>"
            f"<td class=\"meta\">{meta_cell(r.meta, up) if live else '<span class=muted>-</span>'}</td>"
            + (f"<td>{action}</td>" if can_break else "")
            + "</tr>"
        )
    head = "".join(f"<th>{h}</th>" for h in HEADERS) + ("<th></th>" if can_break else "")
    if not rows:
        cols = len(HEADERS) + int(can_break)
        rows.append(f'<tr><td colspan="{cols}" class="muted">No leases.</td></tr>')
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _source_note(source: StoreSource) -> str:
    text = f"Leases in the store the tasks use, found through {escape(source.origin)}."
    if source.per_host:
        text += (" The embedded store lives on each host: this page sees only leases taken on "
                 "the api-server's host. Define the <code>lease_default</code> Connection to "
                 "share one store.")
    return f'<p class="muted">{text}</p>'


def leases_page(records: Sequence[LeaseRecord], source: StoreSource, prefix: str, *,
                can_break: bool, user: str) -> str:
    body = (
        "<h1>Leases</h1>" + _source_note(source)
        + '<form class="filter" method="get" action="./">'
        f'<label for="prefix">Key prefix</label><input type="text" id="prefix" name="prefix" '
        f'value="{escape(prefix)}" placeholder="e.g. billing-">'
        '<button type="submit">Filter</button> <a class="button" href="./">Clear</a></form>'
        + _rows(records, can_break=can_break, up="../")
        + f'<p class="muted">Signed in as {escape(user)}; '
        + ("you may break leases." if can_break else "breaking a lease needs more rights.")
        + ' Times are the store\'s clock. <a href="api/leases">JSON</a></p>'
    )
    return page("Leases", body, store=source.masked_url)


def history_page(key: str, record: LeaseRecord | None, events: Sequence[LeaseEvent],
                 source: StoreSource, *, can_break: bool, unreadable: int = 0) -> str:
    now = ""
    if record is not None:
        now = _rows([record], can_break=can_break, up="../")
    rows = "".join(
        f"<tr><td>{escape(clock(e.at))}</td><td>{state_cell(e.kind)}</td><td class=\"mono\">{e.token}</td>"
        f"<td class=\"mono\">{escape(e.holder or '-')}</td>"
        f"<td class=\"meta\">{escape(event_detail(e))}</td></tr>"
        for e in events
    ) or '<tr><td colspan="5" class="muted">No events.</td></tr>'
    body = (
        f'<p>{link("./", "← All leases")}</p><h1>History of <code>{escape(key)}</code></h1>'
        + (now or '<p class="muted">No such lease.</p>')
        + "<h2>Events (oldest first)</h2><table><thead><tr><th>At</th><th>Event</th>"
        "<th>Token</th><th>Holder</th><th>Detail</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
        + (f'<p class="note">{unreadable} more event(s) could not be read (written by hand?); '
           "<code>leasectl history</code> names them.</p>" if unreadable else "")
        + f'<p class="muted">{link(_q("api/history", key=key), "JSON")}</p>'
    )
    return page(f"Lease {key}", body, store=source.masked_url)


def confirm_page(record: LeaseRecord, confirm: str, source: StoreSource) -> str:
    """Step one of two: what breaking this lease means, and the form that does it."""
    warn = ("Its holder is alive as far as the store knows: another run may start before the "
            "holder notices, and both will run at once until its next renewal fails."
            if record.state == "held" else "Its lease has already expired by the store's clock.")
    body = (
        f'<p>{link("./", "← All leases")}</p><h1>Break lease <code>{escape(record.key)}</code>?</h1>'
        + _rows([record], can_break=False, up="../")
        + f'<div class="note">{escape(warn)} The break is recorded in the key\'s history under your '
        "name; the holder gets <code>LeaseLost</code> at its next renewal.</div>"
        '<form method="post" action="break">'
        f'<input type="hidden" name="key" value="{escape(record.key)}">'
        f'<input type="hidden" name="token" value="{record.token}">'
        f'<input type="hidden" name="confirm" value="{escape(confirm)}">'
        f'<button type="submit" class="danger">Break token {record.token} now</button> '
        f'{link(_q("history", key=record.key), "Cancel", "button")}</form>'
    )
    return page(f"Break {record.key}?", body, store=source.masked_url)


def broken_page(key: str, before: LeaseRecord | None, by: str, source: StoreSource) -> str:
    if before is None or before.holder is None:
        text = f"Lease {key!r} was not held any more; nothing was broken."
    else:
        text = (f"Broke lease {key!r}: token {before.token} of {before.holder} was {before.state}; "
                f"recorded as broken by {by}.")
    body = (f"<h1>{escape(text)}</h1><p>{link(_q('history', key=key), 'History of this key')} · "
            f"{link('./', 'All leases')}</p>")
    return page(f"Broke {key}", body, store=source.masked_url)


def dag_page(dag_id: str, records: Sequence[LeaseRecord], source: StoreSource) -> str:
    """The DAG tab: its iframe runs no scripts, so this is all there is."""
    body = (
        f"<h1>Leases of <code>{escape(dag_id)}</code></h1>"
        '<p class="muted">Leases whose holder meta names this DAG.</p>'
        + _rows(records, can_break=False, up="../")
    )
    return page(f"Leases of {dag_id}", body, store=source.masked_url, scripts=False)


def message_page(title: str, text: str) -> str:
    return page(title, f'<h1>{escape(title)}</h1><p>{escape(text)}</p><p>{link("./", "All leases")}</p>')

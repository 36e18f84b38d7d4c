"""The pages: lease table, per-key history, break confirmation and result,
the DAG tab and messages. Each is one Jinja2 template (``templates/``, shared
by the Airflow 3 app and the Airflow 2.11 view) rendered with autoescape, so
no value reaches the HTML unescaped; all links are relative (the pages sit
one level below the base URL)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from lease_integrations.core import LeaseEvent, LeaseRecord

from .layout import STANDALONE, render
from .links import airflow_link, prefect_link
from .store_source import StoreSource


@dataclass(frozen=True)
class Face:
    """What differs between the Airflow versions' pages: the frame the
    content goes in, where a holder's meta links to, and the server's name."""

    frame: str
    meta_href: Callable[[dict[str, Any], str], str | None]
    server_name: str


def _airflow_3_href(meta: dict[str, Any], up: str) -> str | None:
    return airflow_link(meta, up) or prefect_link(meta)


AIRFLOW_3 = Face(STANDALONE, _airflow_3_href, "api-server")


def _render(face: Face, template: str, title: str, source: StoreSource | None = None,
            **context: Any) -> str:
    return render(template, frame=face.frame, title=title,
                  store=source.masked_url if source else "", source=source, meta_href=face.meta_href,
                  server_name=face.server_name, **context)


def leases_page(records: Sequence[LeaseRecord], source: StoreSource, prefix: str, *,
                can_break: bool, user: str, face: Face = AIRFLOW_3,
                unreadable: Sequence[str] = ()) -> str:
    """``unreadable``: the problems of records the store could not parse,
    for a user who may read every DAG (``actions.leases``)."""
    return _render(face, "leases.html", "Leases", source, records=records, prefix=prefix,
                   can_break=can_break, user=user, unreadable=unreadable)


def history_page(key: str, record: LeaseRecord | None, events: Sequence[LeaseEvent],
                 source: StoreSource, *, can_break: bool, unreadable: int = 0,
                 face: Face = AIRFLOW_3) -> str:
    return _render(face, "history.html", f"Lease {key}", source, key=key, record=record,
                   events=events, can_break=can_break, unreadable=unreadable)


def confirm_page(record: LeaseRecord, confirm: str, source: StoreSource, *,
                 csrf_token: str = "", face: Face = AIRFLOW_3) -> str:
    """Step one of two: what breaking this lease means, and the form that
    does it (with the framework's own CSRF token where it has one)."""
    return _render(face, "confirm.html", f"Break {record.key}?", source, record=record,
                   confirm=confirm, csrf_token=csrf_token)


def broken_page(key: str, before: LeaseRecord | None, by: str, source: StoreSource, *,
                face: Face = AIRFLOW_3) -> str:
    return _render(face, "broken.html", f"Broke {key}", source, key=key, before=before, by=by)


def dag_page(dag_id: str, records: Sequence[LeaseRecord], source: StoreSource, *,
             face: Face = AIRFLOW_3) -> str:
    """The DAG tab: its iframe runs no scripts, so this is all there is."""
    return _render(face, "dag.html", f"Leases of {dag_id}", source, scripts=False, dag_id=dag_id,
                   records=records)


def message_page(title: str, text: str, *, face: Face = AIRFLOW_3) -> str:
    return _render(face, "message.html", title, text=text)

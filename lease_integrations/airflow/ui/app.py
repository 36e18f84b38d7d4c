"""The FastAPI app the plugin mounts at ``/leases``: HTML pages and their JSON
twins. Every route depends on Airflow's ``get_user`` (401 when anonymous);
breaking needs the auth manager's permission and proof of intent
(``auth.py``). Handlers are plain functions: FastAPI runs them in its thread
pool, so a slow store never blocks the api-server's event loop."""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI, Form, Header, HTTPException, Query, Request, status
from fastapi.responses import HTMLResponse, JSONResponse, Response

from lease_integrations.console.render import event_json, record_json
from lease_integrations.core import ConfigurationError, LeaseError, LeaseEvent, LeaseRecord

from . import auth, pages
from .auth import CurrentUser
from .store_source import open_store

HISTORY_LIMIT = 100


class AsciiJSONResponse(JSONResponse):  # type: ignore[misc]  # untyped for mypy without FastAPI
    """JSON with every non-ASCII character as a ``\\uXXXX`` escape, as
    ``leasectl --json`` prints it. Stored meta may hold a lone surrogate
    (any store client can write one), which has no UTF-8 form: Starlette's
    default (``ensure_ascii=False``) failed to encode it and every JSON
    route answered 500."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False, indent=None,
                          separators=(",", ":")).encode("ascii")


#: Sent with every response, errors included: only the Airflow UI's own
#: origin may frame the pages. They live in the UI's iframe, so ``DENY`` would
#: break them; without a policy a page on another origin (even a sibling port
#: or subdomain of the same site, which the browser still sends the session
#: cookie from) could frame the confirm page invisibly and have a signed-in
#: admin click "Break". X-Frame-Options for browsers without CSP level 2.
FRAME_HEADERS = ((b"content-security-policy", b"frame-ancestors 'self'"),
                 (b"x-frame-options", b"SAMEORIGIN"))


class FramePolicy:
    """Plain ASGI middleware that adds ``FRAME_HEADERS`` to every response
    start (the app's own error pages and JSON included)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_policy(message: Any) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                message["headers"] = [*message.get("headers", []),
                                      *(h for h in FRAME_HEADERS if h[0] not in present)]
            await send(message)

        await self.app(scope, receive, send_with_policy)


app = FastAPI(title="Leases", description="Lease locks of lease_integrations (key, holder, token).",
              docs_url=None, redoc_url=None, openapi_url=None,
              default_response_class=AsciiJSONResponse)


def _is_api(request: Request) -> bool:
    path, root = str(request.url.path), str(request.scope.get("root_path", ""))
    if root and path.startswith(root):
        path = path[len(root):]
    return path.startswith("/api/")


def _error(request: Request, code: int, detail: str, headers: dict[str, str] | None = None) -> Response:
    """JSON for ``api/`` routes, a readable page for the rest."""
    if _is_api(request):
        return AsciiJSONResponse({"detail": detail}, code, headers=headers)
    return HTMLResponse(pages.message_page(f"Error {code}", detail), code, headers=headers)


def _http_error(request: Request, exc: HTTPException) -> Response:
    return _error(request, exc.status_code, str(exc.detail), dict(exc.headers or {}))


def _store_error(request: Request, exc: LeaseError) -> Response:
    """A store that cannot be reached (or a bad Connection) is the store's
    problem, not the page's: 503 with the message, whose URL is masked."""
    kind = "configuration" if isinstance(exc, ConfigurationError) else "store"
    return _error(request, status.HTTP_503_SERVICE_UNAVAILABLE, f"lease {kind} error: {exc}")


def _dag_leases(records: list[LeaseRecord], dag_id: str) -> list[LeaseRecord]:
    return [r for r in records if r.holder is not None and r.meta.get("dag_id") == dag_id]


# -- pages ---------------------------------------------------------------------
def _visible(user: Any, records: list[LeaseRecord]) -> list[LeaseRecord]:
    """The rows this user may see (the rule is in ``auth``'s docstring)."""
    access = auth.DagAccess(user)
    return [r for r in records if access.record(r)]


def _key_history(user: Any, key: str, store: Any) -> tuple[LeaseRecord | None, list[LeaseEvent]]:
    """A key's record and events, 403 unless the user may read every DAG they name."""
    auth.require_page(user)
    record, events = store.get(key), store.history(key, HISTORY_LIMIT)
    access = auth.DagAccess(user)
    access.require_key((record is None or access.record(record)) and access.events(events))
    return record, events


def leases(prefix: str = "", user: Any = CurrentUser) -> str:
    auth.require_page(user)
    with open_store() as (store, source):
        records = _visible(user, store.list(prefix))
    return pages.leases_page(records, source, prefix, can_break=auth.may_break(user),
                             user=auth.user_name(user))


def history(key: str = Query(min_length=1), user: Any = CurrentUser) -> str:
    with open_store() as (store, source):
        record, events = _key_history(user, key, store)
    return pages.history_page(key, record, events, source, can_break=auth.may_break(user))


def dag_tab(dag_id: str = Query(min_length=1), user: Any = CurrentUser) -> str:
    auth.DagAccess(user).require_dag(dag_id)
    with open_store() as (store, source):
        records = _dag_leases(store.list(), dag_id)
    return pages.dag_page(dag_id, records, source)


def confirm_break(key: str = Query(min_length=1), user: Any = CurrentUser) -> str:
    """Step one: show what would be broken; the form posts step two."""
    auth.require_break_permission(user)
    with open_store() as (store, source):
        record = store.get(key)
    if record is not None:
        access = auth.DagAccess(user)
        access.require_key(access.record(record))
    if record is None or record.holder is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"lease {key!r} is not held; nothing to break")
    return pages.confirm_page(record, auth.confirm_token(user, key, record.token), source)


def do_break(key: str = Form(min_length=1), token: int = Form(), confirm: str = Form(""),
             user: Any = CurrentUser) -> str:
    """Step two, from the confirm page's form."""
    before, source = _break(user, key, token, header=None, confirm=confirm)
    return pages.broken_page(key, before, auth.user_name(user), source)


# -- JSON ----------------------------------------------------------------------
def api_leases(prefix: str = "", user: Any = CurrentUser) -> dict[str, Any]:
    auth.require_page(user)
    with open_store() as (store, source):
        records = _visible(user, store.list(prefix))
    return {"store": source.masked_url, "found_through": source.origin,
            "may_break": auth.may_break(user), "leases": [record_json(r) for r in records]}


def api_lease(key: str = Query(min_length=1), user: Any = CurrentUser) -> dict[str, Any]:
    auth.require_page(user)
    with open_store() as (store, _):
        record = store.get(key)
    if record is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no lease {key!r}")
    access = auth.DagAccess(user)
    access.require_key(access.record(record))
    return record_json(record)


def api_history(key: str = Query(min_length=1), limit: int = Query(HISTORY_LIMIT, ge=1, le=1000),
                user: Any = CurrentUser) -> dict[str, Any]:
    with open_store() as (store, _):
        _key_history(user, key, store)
        events = store.history(key, limit)
    return {"key": key, "events": [event_json(e) for e in events]}


def api_dag(dag_id: str = Query(min_length=1), user: Any = CurrentUser) -> dict[str, Any]:
    auth.DagAccess(user).require_dag(dag_id)
    with open_store() as (store, _):
        records = _dag_leases(store.list(), dag_id)
    return {"dag_id": dag_id, "leases": [record_json(r) for r in records]}


def api_break(key: str = Query(min_length=1), token: int | None = Query(None),
              x_lease_break: str | None = Header(None), user: Any = CurrentUser) -> dict[str, Any]:
    """For scripts: needs the ``X-Lease-Break: <key>`` header; ``token`` (optional)
    refuses the break with 409 when someone else holds the key by now."""
    before, _ = _break(user, key, token, header=x_lease_break, confirm=None)
    return {"key": key, "broken": before is not None and before.holder is not None,
            "by": auth.user_name(user), "before": None if before is None else record_json(before)}


def _break(user: Any, key: str, token: int | None, *, header: str | None,
           confirm: str | None) -> tuple[LeaseRecord | None, Any]:
    auth.require_break_permission(user)
    auth.require_intent(user, key, token, header=header, confirm=confirm)
    with open_store() as (store, source):
        # The break is always on a token: the confirmed one, else the one of
        # the record the user was just allowed to see. The store breaks only
        # that lease, in one step: a check here followed by the break would
        # break a holder that took the key in between (of another DAG, even).
        current = store.get(key)
        if current is not None:
            access = auth.DagAccess(user)
            access.require_key(access.record(current))
            if token is None:
                token = current.token
        before = store.force_release(key, auth.user_name(user), token=token)
        if before is None and token is not None:
            current = store.get(key)
            if current is not None and current.holder is not None:
                raise HTTPException(status.HTTP_409_CONFLICT,
                                    f"lease {key!r} changed hands (token {current.token}, you "
                                    f"confirmed {token}); nothing broken, look again")
    return before, source


# -- routes --------------------------------------------------------------------
# Registered by call rather than by decorator: FastAPI's decorators are untyped for mypy.
app.add_middleware(FramePolicy)
app.add_exception_handler(HTTPException, _http_error)  # type: ignore[arg-type]
app.add_exception_handler(LeaseError, _store_error)  # type: ignore[arg-type]
app.add_api_route("/", leases, methods=["GET"], response_class=HTMLResponse)
app.add_api_route("/history", history, methods=["GET"], response_class=HTMLResponse)
app.add_api_route("/dag", dag_tab, methods=["GET"], response_class=HTMLResponse)
app.add_api_route("/break", confirm_break, methods=["GET"], response_class=HTMLResponse)
app.add_api_route("/break", do_break, methods=["POST"], response_class=HTMLResponse)
app.add_api_route("/api/leases", api_leases, methods=["GET"])
app.add_api_route("/api/lease", api_lease, methods=["GET"])
app.add_api_route("/api/history", api_history, methods=["GET"])
app.add_api_route("/api/dag", api_dag, methods=["GET"])
app.add_api_route("/api/break", api_break, methods=["POST"])

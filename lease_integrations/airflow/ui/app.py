"""The FastAPI app the plugin mounts at ``/leases`` on Airflow 3: HTML pages
and their JSON twins. Every route depends on Airflow's ``get_user`` (401 when
anonymous); what each does is ``actions.py`` under the rules of ``rules.py``,
shared with the Airflow 2.11 view. Handlers are plain functions: FastAPI runs them in its thread
pool, so a slow store never blocks the api-server's event loop."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from fastapi import FastAPI, Form, Header, HTTPException, Query, Request, status
from fastapi.responses import HTMLResponse, JSONResponse, Response

from lease_integrations.console.render import record_json
from lease_integrations.core import LeaseError

from . import actions, auth, pages
from .auth import CurrentUser
from .layout import TOP_LINKS
from .rules import Refused, confirm_token, user_name


class AsciiJSONResponse(JSONResponse):  # type: ignore[misc]  # untyped for mypy without FastAPI
    """JSON with every non-ASCII character as a ``\\uXXXX`` escape, as
    ``leasectl --json`` prints it. Stored meta may hold a lone surrogate
    (any store client can write one), which has no UTF-8 form: Starlette's
    default (``ensure_ascii=False``) failed to encode it and every JSON
    route answered 500."""

    def render(self, content: Any) -> bytes:
        return actions.ascii_json(content)


#: The hash of the page's one script (``layout.TOP_LINKS``), the only script
#: the policy lets run: an injected ``<script>`` or ``on*=`` attribute would not.
SCRIPT_HASH = base64.b64encode(hashlib.sha256(TOP_LINKS.encode()).digest()).decode()

#: Sent with every response, errors and 500s included. Only the Airflow UI's
#: own origin may frame the pages: they live in the UI's iframe, so ``DENY``
#: would break them; without a policy a page on another origin (even a sibling
#: port or subdomain of the same site, which the browser still sends the
#: session cookie from) could frame the confirm page invisibly and have a
#: signed-in admin click "Break". X-Frame-Options for browsers without CSP
#: level 2; ``nosniff`` so no response (JSON of stored meta) is ever read as
#: a script or a page.
SECURITY_HEADERS = (
    (b"content-security-policy",
     f"frame-ancestors 'self'; script-src 'sha256-{SCRIPT_HASH}'; object-src 'none'; "
     "base-uri 'none'".encode()),
    (b"x-frame-options", b"SAMEORIGIN"),
    (b"x-content-type-options", b"nosniff"),
)


class SecurityHeaders:
    """Plain ASGI middleware that adds ``SECURITY_HEADERS`` to every response
    start. It wraps the whole app (``LeasesApp``), outside Starlette's error
    middleware, which answers a 500 itself and would otherwise send it bare."""

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
                                      *(h for h in SECURITY_HEADERS if h[0] not in present)]
            await send(message)

        await self.app(scope, receive, send_with_policy)


class LeasesApp(FastAPI):  # type: ignore[misc]  # untyped for mypy without FastAPI
    """FastAPI with ``SecurityHeaders`` outermost: ``add_middleware`` would
    put it inside ``ServerErrorMiddleware``."""

    def build_middleware_stack(self) -> Any:
        return SecurityHeaders(super().build_middleware_stack())


app = LeasesApp(title="Leases", description="Lease locks of lease_integrations (key, holder, token).",
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


def _refused(request: Request, exc: Refused) -> Response:
    return _error(request, exc.status, exc.detail)


def _store_error(request: Request, exc: LeaseError) -> Response:
    return _error(request, status.HTTP_503_SERVICE_UNAVAILABLE, actions.store_error_text(exc))


# -- pages ---------------------------------------------------------------------
def leases(prefix: str = "", user: Any = CurrentUser) -> str:
    access = auth.access(user)
    records, source, unreadable = actions.leases(access, prefix)
    return pages.leases_page(records, source, prefix, can_break=access.may_break_leases(),
                             user=user_name(user), unreadable=unreadable)


def history(key: str = Query(min_length=1), user: Any = CurrentUser) -> str:
    access = auth.access(user)
    record, events, unreadable, source = actions.key_history(access, key)
    return pages.history_page(key, record, events, source, can_break=access.may_break_leases(),
                              unreadable=unreadable)


def dag_tab(dag_id: str = Query(min_length=1), user: Any = CurrentUser) -> str:
    records, source = actions.dag_leases(auth.access(user), dag_id)
    return pages.dag_page(dag_id, records, source)


def confirm_break(key: str = Query(min_length=1), user: Any = CurrentUser) -> str:
    """Step one: show what would be broken; the form posts step two."""
    record, source = actions.breakable(auth.access(user), key)
    return pages.confirm_page(record, confirm_token(auth.secret(), user, key, record.token), source)


def do_break(key: str = Form(min_length=1), token: int = Form(), confirm: str = Form(""),
             user: Any = CurrentUser) -> str:
    """Step two, from the confirm page's form."""
    before, source = actions.break_lease(auth.access(user), auth.secret(), key, token, header=None,
                                         confirm=confirm)
    return pages.broken_page(key, before, user_name(user), source)


# -- JSON ----------------------------------------------------------------------
def api_leases(prefix: str = "", user: Any = CurrentUser) -> dict[str, Any]:
    return actions.leases_json(auth.access(user), prefix)


def api_lease(key: str = Query(min_length=1), user: Any = CurrentUser) -> dict[str, Any]:
    return record_json(actions.lease(auth.access(user), key))


def api_history(key: str = Query(min_length=1),
                limit: int = Query(actions.HISTORY_LIMIT, ge=1, le=1000),
                user: Any = CurrentUser) -> dict[str, Any]:
    return actions.history_json(auth.access(user), key, limit)


def api_dag(dag_id: str = Query(min_length=1), user: Any = CurrentUser) -> dict[str, Any]:
    return actions.dag_json(auth.access(user), dag_id)


def api_break(key: str = Query(min_length=1), token: int | None = Query(None),
              x_lease_break: str | None = Header(None), user: Any = CurrentUser) -> dict[str, Any]:
    """For scripts: needs the ``X-Lease-Break: <key>`` header; ``token`` (optional)
    refuses the break with 409 unless the key is still held on that token."""
    before, _ = actions.break_lease(auth.access(user), auth.secret(), key, token,
                                    header=x_lease_break, confirm=None)
    return actions.break_json(before, key, user_name(user))


# -- routes --------------------------------------------------------------------
# Registered by call rather than by decorator: FastAPI's decorators are untyped for mypy.
app.add_exception_handler(HTTPException, _http_error)  # type: ignore[arg-type]
app.add_exception_handler(Refused, _refused)  # type: ignore[arg-type]
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

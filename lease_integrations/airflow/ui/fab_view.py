"""The Leases page on Airflow 2.11, whose webserver is Flask: a Flask
AppBuilder view under Browse, rendering the same templates as the Airflow 3
app (``templates/``, content only) inside Airflow's own layout, and taking
the same steps (``actions.py``) under the same rules (``rules.py``).

What differs is only how a request arrives: FAB's session (anonymous users
are sent to the login page), the auth manager from ``airflow.www`` (FAB on
2.11: ``can_read`` / ``can_delete`` on ``Leases``, created with the view and
granted to Admin by Airflow's role sync), Flask-WTF's CSRF protection, which
Airflow applies to every POST (the confirm form carries its token as well as
our own confirm token), and confirm tokens signed with ``[webserver]
secret_key``. There is no ``api/break`` here: a cookie-authenticated POST
without a form would need an exemption from that protection; scripts on
2.11 break with ``leasectl break``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from flask import Blueprint, Response, redirect, request
from flask_appbuilder import BaseView, expose
from markupsafe import Markup

from lease_integrations.console.render import record_json
from lease_integrations.core import LeaseError

from . import actions, pages
from .layout import FRAGMENT, STYLE
from .links import airflow2_link, prefect_link
from .rules import RESOURCE, Access, Refused, confirm_token, user_name

#: Sent with every answer. The page runs Airflow's own scripts, so there is no
#: script policy; framing only by the UI's own origin, as on Airflow 3.
HEADERS = {"Content-Security-Policy": "frame-ancestors 'self'; object-src 'none'",
           "X-Frame-Options": "SAMEORIGIN", "X-Content-Type-Options": "nosniff"}


def _headers_under_leases(response: Response) -> Response:
    """The page's headers on every answer under ``/leases``, also those Airflow
    or Flask make before or instead of the view (Flask-WTF's CSRF 400, a 405,
    FAB's redirects, a 404 below the prefix). Not covered: what never reaches
    Flask (gunicorn's own errors), and the login page the redirect leads to,
    which is Airflow's, outside ``/leases``."""
    if request.path == LeasesView.route_base or request.path.startswith(LeasesView.route_base + "/"):
        for name, value in HEADERS.items():
            response.headers.setdefault(name, value)
    return response


#: Registered through the plugin's ``flask_blueprints``: its ``after_app_request``
#: runs for every response of the webserver, the view's and Airflow's own.
HEADERS_BLUEPRINT = Blueprint("lease_integrations_headers", __name__)
HEADERS_BLUEPRINT.after_app_request(_headers_under_leases)


def _href(meta: dict[str, Any], up: str) -> str | None:
    return airflow2_link(meta, up) or prefect_link(meta)


FACE = pages.Face(FRAGMENT, _href, "webserver")


def _manager() -> Any:
    from airflow.www.extensions.init_auth_manager import get_auth_manager

    return get_auth_manager()


def _access() -> Access:
    from airflow.auth.managers.models.resource_details import DagDetails

    manager = _manager()
    return Access(manager.get_user(), manager, DagDetails)


def _secret() -> bytes:
    from airflow.configuration import conf

    return str(conf.get("webserver", "secret_key")).encode()


def _arg(name: str, source: Any = None) -> str:
    value = (source if source is not None else request.args).get(name, "")
    if not value:
        raise Refused(400, f"the {name!r} parameter is missing")
    return str(value)


def _number(name: str, text: str | None) -> int | None:
    if text is None or text == "":
        return None
    try:
        return int(text)
    except ValueError:
        raise Refused(400, f"the {name!r} parameter must be a whole number, not {text!r}") from None


class LeasesView(BaseView):  # type: ignore[misc]  # untyped for mypy without Flask AppBuilder
    """Browse -> Leases. FAB makes ``base_permissions`` on ``Leases`` when it
    adds the view; which user holds them is the auth manager's business.
    ``menu_access`` is among them because the menu entry shares the view's
    resource name: FAB deletes, at every webserver start, any permission on a
    view's resource that the view does not declare, and with it every role's
    grant of the menu entry."""

    route_base = "/leases"
    default_view = "leases"
    class_permission_name = RESOURCE
    base_permissions = ["can_read", "can_delete", "menu_access"]
    template_folder = str(Path(__file__).parent / "templates" / "flask")

    def _page(self, html: str, title: str, status: int = 200) -> Response:
        body = self.render_template("lease_integrations/leases_frame.html", title=title,
                                    body=Markup(html), style=Markup(STYLE))
        return Response(body, status, headers=HEADERS, mimetype="text/html")

    @staticmethod
    def _json(content: Any, status: int = 200) -> Response:
        return Response(actions.ascii_json(content), status, headers=HEADERS,
                        mimetype="application/json")

    def _error(self, api: bool, status: int, detail: str) -> Response:
        if api:
            return self._json({"detail": detail}, status)
        title = f"Error {status}"
        return self._page(pages.message_page(title, detail, face=FACE), title, status)

    # -- routes (each answers through ``_answer``) -----------------------------
    @expose("/")
    def leases(self) -> Response:
        return self._answer(self._leases)

    @expose("/history")
    def history(self) -> Response:
        return self._answer(self._history)

    @expose("/dag")
    def dag(self) -> Response:
        return self._answer(self._dag)

    @expose("/break", methods=["GET"])
    def confirm_break(self) -> Response:
        return self._answer(self._confirm)

    @expose("/break", methods=["POST"])
    def do_break(self) -> Response:
        return self._answer(self._break)

    @expose("/api/leases")
    def api_leases(self) -> Response:
        return self._answer(self._api_leases, api=True)

    @expose("/api/lease")
    def api_lease(self) -> Response:
        return self._answer(lambda: self._json(record_json(actions.lease(_access(), _arg("key")))),
                            api=True)

    @expose("/api/history")
    def api_history(self) -> Response:
        return self._answer(self._api_history, api=True)

    @expose("/api/dag")
    def api_dag(self) -> Response:
        return self._answer(self._api_dag, api=True)

    def _answer(self, handler: Callable[[], Response], *, api: bool = False) -> Response:
        """Sign-in first (a page sends the browser to the login page, JSON
        answers 401), then the handler; a refusal or a store that cannot be
        reached answers as on Airflow 3 (its text masks the URL)."""
        if not _manager().is_logged_in():
            if api:
                return self._json({"detail": "not signed in"}, 401)
            return redirect(_manager().get_url_login(next_url=request.url))
        try:
            return handler()
        except Refused as refused:
            return self._error(api, refused.status, refused.detail)
        except LeaseError as exc:
            return self._error(api, 503, actions.store_error_text(exc))

    # -- pages -----------------------------------------------------------------
    def _leases(self) -> Response:
        access, prefix = _access(), request.args.get("prefix", "")
        records, source, unreadable = actions.leases(access, prefix)
        return self._page(pages.leases_page(records, source, prefix, face=FACE,
                                            can_break=access.may_break_leases(),
                                            user=user_name(access.user), unreadable=unreadable),
                          "Leases")

    def _history(self) -> Response:
        access, key = _access(), _arg("key")
        record, events, unreadable, source = actions.key_history(access, key)
        return self._page(pages.history_page(key, record, events, source, face=FACE,
                                             can_break=access.may_break_leases(),
                                             unreadable=unreadable), f"Lease {key}")

    def _dag(self) -> Response:
        dag_id = _arg("dag_id")
        records, source = actions.dag_leases(_access(), dag_id, page_needed=True)
        return self._page(pages.dag_page(dag_id, records, source, face=FACE), f"Leases of {dag_id}")

    def _confirm(self) -> Response:
        from flask_wtf.csrf import generate_csrf

        access, key = _access(), _arg("key")
        record, source = actions.breakable(access, key)
        confirm = confirm_token(_secret(), access.user, key, record.token)
        return self._page(pages.confirm_page(record, confirm, source, csrf_token=generate_csrf(),
                                             face=FACE), f"Break {key}?")

    def _break(self) -> Response:
        access, key = _access(), _arg("key", request.form)
        token = _number("token", request.form.get("token"))
        if token is None:
            raise Refused(400, "the 'token' parameter is missing")
        before, source = actions.break_lease(access, _secret(), key, token, header=None,
                                             confirm=request.form.get("confirm", ""),
                                             header_honoured=False)
        return self._page(pages.broken_page(key, before, user_name(access.user), source, face=FACE),
                          f"Broke {key}")

    # -- JSON --------------------------------------------------------------------
    def _api_leases(self) -> Response:
        return self._json(actions.leases_json(_access(), request.args.get("prefix", "")))

    def _api_history(self) -> Response:
        limit = _number("limit", request.args.get("limit"))
        limit = actions.HISTORY_LIMIT if limit is None else limit
        if not 1 <= limit <= 1000:
            raise Refused(400, "the 'limit' parameter must be from 1 to 1000")
        return self._json(actions.history_json(_access(), _arg("key"), limit))

    def _api_dag(self) -> Response:
        return self._json(actions.dag_json(_access(), _arg("dag_id"), page_needed=True))

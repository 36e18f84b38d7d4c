"""The Airflow plugin: adds the Leases page to the UI.

Airflow 3's api-server is FastAPI: the plugin mounts the app (``app.py``) and
adds it under Browse and as a tab on every DAG. Airflow 2.11's webserver is
Flask: the page is a Flask AppBuilder view under Browse (``fab_view.py``);
both render the same templates.

Shipped through the ``airflow.plugins`` entry point, not the provider's
``get_provider_info()["plugins"]``: Airflow reads the latter only with
``lazy_discover_providers=False``, and declaring both records an import error.
The version is read here rather than from ``_compat``, which imports operator
classes: the plugins manager loads this module while Airflow itself is still
starting.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from airflow import __version__ as AIRFLOW_VERSION
from airflow.plugins_manager import AirflowPlugin

#: Where the page lives below the UI's base URL.
URL_PREFIX = "/leases"

AIRFLOW_3 = int(AIRFLOW_VERSION.split(".")[0]) >= 3

fastapi_apps: list[dict[str, Any]] = []
external_views: list[dict[str, Any]] = []
if AIRFLOW_3:
    from .app import app

    fastapi_apps.append({"app": app, "url_prefix": URL_PREFIX, "name": "Leases"})
    external_views.extend([
        # Browse -> Leases: the UI shows href in an iframe at <base>/plugin/leases.
        {"name": "Leases", "href": "leases/", "url_route": "leases", "category": "browse",
         "destination": "nav"},
        # A "Leases" tab on every DAG; the UI fills in {DAG_ID}.
        {"name": "Leases", "href": "leases/dag?dag_id={DAG_ID}", "url_route": "leases-dag",
         "destination": "dag"},
    ])


class LeasesPlugin(AirflowPlugin):  # type: ignore[misc]
    name = "lease_integrations_leases"
    fastapi_apps = fastapi_apps
    external_views = external_views

    @cached_property
    def appbuilder_views(self) -> list[dict[str, Any]]:
        """The 2.11 view, built only where it is asked for: every Airflow 2
        process loads plugins (the scheduler, each task's), and only the
        webserver reads this; importing Flask AppBuilder for it cost each of
        the others up to 0.8 s."""
        if AIRFLOW_3:
            return []
        from .fab_view import LeasesView

        return [{"name": "Leases", "category": "Browse", "view": LeasesView()}]

    @cached_property
    def flask_blueprints(self) -> list[Any]:
        """2.11: the blueprint that puts the page's security headers on every
        answer under ``/leases``, Airflow's own included (``fab_view``)."""
        if AIRFLOW_3:
            return []
        from .fab_view import HEADERS_BLUEPRINT

        return [HEADERS_BLUEPRINT]

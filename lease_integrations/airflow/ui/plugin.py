"""The Airflow plugin: mounts the Leases app and adds it to the UI.

Shipped through the ``airflow.plugins`` entry point, not the provider's
``get_provider_info()["plugins"]``: Airflow reads the latter only with
``lazy_discover_providers=False``, and declaring both records an import error.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from .app import app

#: Where the app lives below the api-server's base URL.
URL_PREFIX = "/leases"


class LeasesPlugin(AirflowPlugin):  # type: ignore[misc]
    name = "lease_integrations_leases"
    fastapi_apps = [{"app": app, "url_prefix": URL_PREFIX, "name": "Leases"}]
    external_views = [
        # Browse -> Leases: the UI shows href in an iframe at <base>/plugin/leases.
        {"name": "Leases", "href": "leases/", "url_route": "leases", "category": "browse",
         "destination": "nav"},
        # A "Leases" tab on every DAG; the UI fills in {DAG_ID}.
        {"name": "Leases", "href": "leases/dag?dag_id={DAG_ID}", "url_route": "leases-dag",
         "destination": "dag"},
    ]

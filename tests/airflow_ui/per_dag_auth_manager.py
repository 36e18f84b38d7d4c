"""A small auth manager with per-DAG permissions, for the Leases page tests
(``AIRFLOW__CORE__AUTH_MANAGER=per_dag_auth_manager.PerDagAuthManager``):
SimpleAuthManager's users and roles, except that a user named in
``$LEASE_TEST_DAG_ACCESS`` (JSON: ``{"user": {"dags": [...], "leases_page":
bool}}``) may read only the DAGs listed for it, and sees the Leases page only
when ``leases_page`` is true; for a user whose rules say ``"fail": true``
every custom-view question raises, as an auth manager whose backend is down
does (the page's 500). It stands in for FAB or Keycloak with per-DAG
roles: the plugin asks it exactly as it would ask them."""

from __future__ import annotations

import json
import os
from typing import Any

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager


def _rules(user: Any) -> dict[str, Any] | None:
    found: dict[str, Any] | None = json.loads(
        os.environ.get("LEASE_TEST_DAG_ACCESS", "{}")).get(user.get_name())
    return found


class PerDagAuthManager(SimpleAuthManager):  # type: ignore[misc]
    def is_authorized_dag(self, *, method: Any, user: Any, access_entity: Any = None,
                          details: Any = None) -> bool:
        rules = _rules(user)
        if rules is not None and (details is None or details.id not in rules["dags"]):
            return False
        return bool(super().is_authorized_dag(method=method, user=user, access_entity=access_entity,
                                              details=details))

    def is_authorized_custom_view(self, *, method: Any, resource_name: str, user: Any) -> bool:
        rules = _rules(user)
        if rules is not None and rules.get("fail"):
            raise RuntimeError("the auth manager's backend is down")
        if rules is not None and resource_name == "Leases" and method == "GET" \
                and not rules["leases_page"]:
            return False
        return bool(super().is_authorized_custom_view(method=method, resource_name=resource_name,
                                                      user=user))

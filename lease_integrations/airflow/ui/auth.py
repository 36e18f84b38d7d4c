"""Who may see leases, who may break them, and proof that a break was meant.

Every route depends on ``get_user``, which accepts the UI's session cookie or
a Bearer token and answers 401 without one. Beyond that, the auth manager
decides (FAB, Keycloak or a custom one may grant per DAG):

- the Leases page, its JSON and a key's history need ``GET`` on the custom
  view ``Leases`` (``is_authorized_custom_view``; under SimpleAuthManager
  every role has it);
- a lease whose meta names a ``dag_id`` is shown only to users who may read
  that DAG (``is_authorized_dag(method="GET")``); a lease that names no DAG
  (a Prefect flow's, a script's) needs only the page's permission. A key's
  history and record need read on every DAG its record and events name;
- the DAG tab needs read on its DAG, and shows only that DAG's leases;
- breaking needs, besides the lease's read rule, the auth manager's
  permission for a custom action, ``is_authorized_custom_view(method="DELETE",
  resource_name="Leases")``; SimpleAuthManager's version of it ignores method
  and resource (any Viewer would pass), so under it only the Admin role may
  break.

A break arrives with the browser's cookie, so a page on another site could
post one: every break must also carry either the ``X-Lease-Break`` header
(which a cross-site form cannot set, and a cross-origin script cannot send
without a CORS pre-flight the api-server refuses) or a confirmation token
that only our confirm page hands out, bound to the user, the key and the
lease token that page showed.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Iterable, Mapping
from typing import Any

from airflow.api_fastapi.core_api.security import get_user
from fastapi import Depends, HTTPException, status

from lease_integrations.core import LeaseEvent, LeaseRecord

#: The resource name a non-simple auth manager grants ``DELETE`` on (FAB:
#: the ``can_delete`` permission on ``Leases``).
RESOURCE = "Leases"
#: The header a script or API client sends with a break: value = the key.
BREAK_HEADER = "X-Lease-Break"
#: How long a confirm page's token stays good (seconds).
TOKEN_LIFETIME = 900

#: The dependency every route takes: 401 for anonymous requests.
CurrentUser = Depends(get_user)


def user_name(user: Any) -> str:
    """The name recorded in history as who broke a lease."""
    return str(user.get_name())


def may_read_page(user: Any) -> bool:
    from airflow.api_fastapi.app import get_auth_manager

    return bool(get_auth_manager().is_authorized_custom_view(method="GET", resource_name=RESOURCE,
                                                             user=user))


def require_page(user: Any) -> None:
    if not may_read_page(user):
        raise HTTPException(status.HTTP_403_FORBIDDEN,
                            f"user {user_name(user)!r} may not view leases (needs GET on "
                            f"{RESOURCE!r})")


class DagAccess:
    """The auth manager's answers for one request's user, one call per DAG."""

    def __init__(self, user: Any) -> None:
        self.user = user
        self._known: dict[str, bool] = {}

    def dag(self, dag_id: str) -> bool:
        found = self._known.get(dag_id)
        if found is None:
            from airflow.api_fastapi.app import get_auth_manager
            from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails

            found = self._known[dag_id] = bool(get_auth_manager().is_authorized_dag(
                method="GET", details=DagDetails(id=dag_id), user=self.user))
        return found

    def meta(self, meta: Mapping[str, Any]) -> bool:
        """True when the meta names no DAG, or one the user may read."""
        dag_id = meta.get("dag_id") if isinstance(meta, Mapping) else None
        return dag_id is None or dag_id == "" or self.dag(str(dag_id))

    def record(self, record: LeaseRecord) -> bool:
        return self.meta(record.meta)

    def events(self, events: Iterable[LeaseEvent]) -> bool:
        """True when every DAG the events' holders named may be read."""
        return all(self.meta(e.detail.get("meta") or {}) for e in events)

    def require_dag(self, dag_id: str) -> None:
        if not self.dag(dag_id):
            raise HTTPException(status.HTTP_403_FORBIDDEN,
                                f"user {user_name(self.user)!r} may not read DAG {dag_id!r}")

    def require_key(self, ok: bool) -> None:
        """403 without naming the DAG: the user did not ask about one."""
        if not ok:
            raise HTTPException(status.HTTP_403_FORBIDDEN,
                                f"user {user_name(self.user)!r} may not read a DAG that holds or "
                                "held this lease")


def may_break(user: Any) -> bool:
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

    manager = get_auth_manager()
    if isinstance(manager, SimpleAuthManager):
        return str(getattr(user, "role", "") or "").upper() == "ADMIN"
    return bool(manager.is_authorized_custom_view(method="DELETE", resource_name=RESOURCE, user=user))


def require_break_permission(user: Any) -> None:
    if not may_break(user):
        raise HTTPException(status.HTTP_403_FORBIDDEN,
                            f"user {user_name(user)!r} may not break leases (needs DELETE on "
                            f"{RESOURCE!r}; the Admin role under SimpleAuthManager)")


def _signing_key() -> bytes:
    # [api] secret_key: the api-server's own signing secret, shared by its
    # workers, so a token made by one worker checks on another.
    from airflow.api_fastapi.auth.tokens import get_signing_key

    key: str = get_signing_key("api", "secret_key")
    return key.encode()


def _mac(user: Any, key: str, token: int, issued: int) -> str:
    message = "\0".join(("lease-break", str(user.get_id()), key, str(token), str(issued)))
    return hmac.new(_signing_key(), message.encode(), hashlib.sha256).hexdigest()


def confirm_token(user: Any, key: str, token: int) -> str:
    """The token the confirm page puts in its form."""
    issued = int(time.time())
    return f"{issued}.{_mac(user, key, token, issued)}"


def check_confirm_token(value: str, user: Any, key: str, token: int) -> bool:
    issued_text, _, mac = value.partition(".")
    if not issued_text.isdigit() or not mac:
        return False
    issued = int(issued_text)
    if not 0 <= time.time() - issued <= TOKEN_LIFETIME:
        return False
    return hmac.compare_digest(mac, _mac(user, key, token, issued))


def require_intent(user: Any, key: str, token: int | None, *, header: str | None,
                   confirm: str | None) -> None:
    """403 unless the break carries the header or a valid confirm token."""
    if header is not None and header == key:
        return
    if confirm and token is not None and check_confirm_token(confirm, user, key, token):
        return
    raise HTTPException(status.HTTP_403_FORBIDDEN,
                        f"a break needs the {BREAK_HEADER} header (value: the key) or the "
                        "confirmation token from the Leases page; open the page and confirm again")

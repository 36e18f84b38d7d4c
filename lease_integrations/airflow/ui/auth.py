"""The Airflow 3 face of the rules in ``rules.py``: who the user is, which
auth manager answers, and the key confirm tokens are signed with.

Every route depends on ``get_user``, which accepts the UI's session cookie or
a Bearer token and answers 401 without one.
"""

from __future__ import annotations

from typing import Any

from airflow.api_fastapi.core_api.security import get_user
from fastapi import Depends

from .rules import Access

#: The dependency every route takes: 401 for anonymous requests.
CurrentUser = Depends(get_user)


def access(user: Any) -> Access:
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

    manager = get_auth_manager()
    return Access(user, manager, DagDetails, admin_by_role=isinstance(manager, SimpleAuthManager))


def secret() -> bytes:
    """``[api] secret_key``: the api-server's own signing secret, shared by its
    workers, so a token made by one worker checks on another."""
    from airflow.api_fastapi.auth.tokens import get_signing_key

    key: str = get_signing_key("api", "secret_key")
    return key.encode()

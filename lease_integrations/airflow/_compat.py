"""Airflow names that moved between the supported releases, imported from one place.

Airflow 3.2 made ``airflow.sdk.exceptions`` the public home of the task-facing
exceptions and deprecated the ``airflow.exceptions`` spellings; Airflow 3.0 and
3.1 only have the latter. Every module of this package imports these names from
here, so supporting another release means editing this file alone. The newest
spelling is tried first, so new Airflow never sees a deprecation warning.
The secrets backends a console process searches live here for the same reason.
"""

from __future__ import annotations

from typing import Any

try:  # Airflow >= 3.2
    from airflow.sdk.exceptions import (
        AirflowNotFoundException,
        AirflowSkipException,
        AirflowTaskTerminated,
    )
except ImportError:  # Airflow 3.0, 3.1
    from airflow.exceptions import (  # type: ignore[no-redef]
        AirflowNotFoundException,
        AirflowSkipException,
        AirflowTaskTerminated,
    )

try:  # Airflow >= 3.3: a backend's "no" that must not fall through to the next one
    from airflow.sdk.exceptions import AirflowSecretsBackendAccessDenied

    ACCESS_DENIED: tuple[type[BaseException], ...] = (AirflowSecretsBackendAccessDenied,)
except ImportError:  # older releases have no such answer
    ACCESS_DENIED = ()


def secrets_backends() -> list[Any]:
    """Airflow's secrets backends for a process that is not a task, in its search
    order: a configured backend, ``AIRFLOW_CONN_*``, the metadata database
    (the same function and order on 2.11 and 3.x)."""
    from airflow.configuration import ensure_secrets_loaded

    return list(ensure_secrets_loaded())


__all__ = ["ACCESS_DENIED", "AirflowNotFoundException", "AirflowSkipException",
           "AirflowTaskTerminated", "secrets_backends"]

"""Airflow names that moved between the supported releases, imported from one place.

Airflow 3.2 made ``airflow.sdk.exceptions`` the public home of the task-facing
exceptions and deprecated the ``airflow.exceptions`` spellings; Airflow 3.0 and
3.1 only have the latter. Every module of this package imports these names from
here, so supporting another release means editing this file alone. The newest
spelling is tried first, so new Airflow never sees a deprecation warning.
"""

from __future__ import annotations

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

__all__ = ["AirflowNotFoundException", "AirflowSkipException", "AirflowTaskTerminated"]

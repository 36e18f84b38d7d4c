"""Airflow glue: ``LeasedPythonOperator``, ``@task.leased`` and the trigger
behind the deferrable wait. Imports only the core's public names."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .decorator import leased_task
    from .operator import LeasedPythonOperator

__all__ = ["LeasedPythonOperator", "leased_task"]


def __getattr__(name: str) -> Any:
    # Lazy, so the provider entry point (provider.py) never imports Airflow.
    if name == "LeasedPythonOperator":
        from .operator import LeasedPythonOperator

        return LeasedPythonOperator
    if name == "leased_task":
        from .decorator import leased_task

        return leased_task
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

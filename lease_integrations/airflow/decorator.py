"""``@task.leased``: the TaskFlow form of ``LeasedPythonOperator``.

Registered under the provider's ``task-decorators``, so it appears on
Airflow's own ``task`` object once the package is installed::

    from airflow.sdk import task          # Airflow 2.11: from airflow.decorators import task

    @task.leased(lease_key="billing", lease_ttl=60, on_busy="skip")
    def charge(**context):
        token = context["lease"].token

    @task.leased(lease_key="billing-{{ tenant }}")   # one lease per tenant
    def bill(tenant: str) -> None: ...

    bill.expand(tenant=["acme", "globex"])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ._compat import DecoratedOperator, TaskDecorator, task_decorator_factory
from .operator import LeasedPythonOperator


class _LeasedDecoratedOperator(DecoratedOperator, LeasedPythonOperator):  # type: ignore[misc]
    template_fields: Sequence[str] = ("templates_dict", "op_args", "op_kwargs")
    template_fields_renderers = {"templates_dict": "json", "op_args": "py", "op_kwargs": "py"}
    custom_operator_name: str = "@task.leased"

    def __init__(self, *, python_callable: Callable[..., Any], op_args: Any, op_kwargs: Any,
                 **kwargs: Any) -> None:
        kwargs_to_upstream = {
            "python_callable": python_callable, "op_args": op_args, "op_kwargs": op_kwargs,
        }
        super().__init__(kwargs_to_upstream=kwargs_to_upstream, python_callable=python_callable,
                         op_args=op_args, op_kwargs=op_kwargs, **kwargs)


def leased_task(
    python_callable: Callable[..., Any] | None = None,
    multiple_outputs: bool | None = None,
    **kwargs: Any,
) -> TaskDecorator:
    """``@task.leased(lease_key=..., lease_ttl=..., on_busy=..., ...)``: takes the
    arguments of ``LeasedPythonOperator`` and of ``@task``. The lease is in the
    context as ``lease`` (take ``**context``, or ``lease=None`` as a parameter)."""
    return task_decorator_factory(
        python_callable=python_callable,
        multiple_outputs=multiple_outputs,
        decorated_operator_class=_LeasedDecoratedOperator,
        **kwargs,
    )

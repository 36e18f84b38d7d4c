"""Run by test_airflow_smoke in a fresh interpreter: checks that the provider
registered ``task.leased``, runs one DAG with a ``@task.leased`` task and a
``LeasedPythonOperator`` through ``dag.test()``, and prints one ``RESULT``
line with the task states; each body writes the token it saw to
``$LEASE_SMOKE_DIR/<task>.token``.

The store comes from ``$LEASE_STORE_URL``."""

from __future__ import annotations

import json
import os
from typing import Any

try:  # Airflow 3
    from airflow.sdk import dag, task
except ImportError:  # Airflow 2.11
    from airflow.decorators import dag, task

from lease_integrations.airflow import LeasedPythonOperator

KEY = "lease-smoke"  # each test run has its own store file, so one fixed key is enough


def _record(name: str, context: dict[str, Any]) -> None:
    """A file per task body, named after it and holding the token it saw:
    the test reads them whatever Airflow does with the task's stdout."""
    path = os.path.join(os.environ["LEASE_SMOKE_DIR"], f"{name}.token")
    with open(path, "w") as f:
        f.write(str(context["lease"].token))


@dag(dag_id="lease_smoke", schedule=None, catchup=False)
def lease_smoke() -> None:
    @task.leased(lease_key=KEY, lease_ttl=30, on_busy="skip")
    def decorated(**context: Any) -> None:
        _record("decorated", context)

    def call(**context: Any) -> None:
        _record("operator", context)

    decorated() >> LeasedPythonOperator(task_id="operator", python_callable=call,
                                        lease_key=KEY, lease_ttl=30, on_busy="skip")


# At module level: Airflow >= 3.1's dag.test() parses the DAG folder for it.
SMOKE_DAG = lease_smoke()


def main() -> None:
    registered = callable(getattr(task, "leased", None))
    dag_run = SMOKE_DAG.test()
    states = {ti.task_id: str(getattr(ti.state, "value", ti.state))
              for ti in dag_run.get_task_instances()}
    print("RESULT " + json.dumps({"registered": registered, "tasks": states}), flush=True)


if __name__ == "__main__":
    main()

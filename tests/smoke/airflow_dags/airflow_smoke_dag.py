"""Run by test_airflow_smoke in a fresh interpreter: checks that the provider
registered ``task.leased``, runs one DAG with a ``@task.leased`` task and a
``LeasedPythonOperator`` through ``dag.test()``, and prints one ``RESULT``
line with the task states; each body writes the token it saw to
``$LEASE_SMOKE_DIR/<task>.token``.

With the argument ``lost`` it runs ``lease_smoke_lost`` instead: its task
writes its token and waits for the test to break its lease; the default
``on_lost="exit"`` then ends the process (status 75) before the body can
write ``$LEASE_SMOKE_DIR/ended``.

The store comes from ``$LEASE_STORE_URL``."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

try:  # Airflow 3
    from airflow.sdk import dag, task
except ImportError:  # Airflow 2.11
    from airflow.decorators import dag, task

from lease_integrations.airflow import LeasedPythonOperator

KEY = "lease-smoke"  # each test run has its own store file, so one fixed key is enough
LOST_KEY = "lease-smoke-lost"
BOUND = 180.0  # how long the lost task waits for the break (never reached when all is well)


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


@dag(dag_id="lease_smoke_lost", schedule=None, catchup=False)
def lease_smoke_lost() -> None:
    @task.leased(lease_key=LOST_KEY, lease_ttl=6, on_busy="fail")
    def held(**context: Any) -> None:
        _record("held", context)
        deadline = time.monotonic() + BOUND
        while time.monotonic() < deadline:  # fail-stop ends the process long before
            time.sleep(0.05)
        with open(os.path.join(os.environ["LEASE_SMOKE_DIR"], "ended"), "w") as f:
            f.write("the body outlived its lease")

    held()


# At module level: Airflow >= 3.1's dag.test() parses the DAG folder for them.
SMOKE_DAG = lease_smoke()
LOST_DAG = lease_smoke_lost()


def main() -> None:
    registered = callable(getattr(task, "leased", None))
    dag_run = (LOST_DAG if sys.argv[1:] == ["lost"] else SMOKE_DAG).test()
    states = {ti.task_id: str(getattr(ti.state, "value", ti.state))
              for ti in dag_run.get_task_instances()}
    print("RESULT " + json.dumps({"registered": registered, "tasks": states}), flush=True)


if __name__ == "__main__":
    main()

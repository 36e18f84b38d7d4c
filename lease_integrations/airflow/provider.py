"""Provider info for Airflow's ``apache_airflow_provider`` entry point.

Airflow reads this at start-up to find ``@task.leased`` and the trigger; it
must import nothing heavy (no Airflow, no store clients), because every
Airflow process, even one that never runs a leased task, calls it.
"""

from __future__ import annotations

from typing import Any

PACKAGE_NAME = "lease-integrations"


def get_provider_info() -> dict[str, Any]:
    from lease_integrations import __version__

    return {
        "package-name": PACKAGE_NAME,
        "name": "Lease Integrations",
        "description": "Single-runner tasks: lease locks with fencing tokens "
        "(LeasedPythonOperator, @task.leased).",
        "versions": [__version__],
        "operators": [
            {
                "integration-name": "Lease Integrations",
                "python-modules": ["lease_integrations.airflow.operator",
                                   "lease_integrations.airflow.run_lease_tasks"],
            }
        ],
        "triggers": [
            {
                "integration-name": "Lease Integrations",
                "python-modules": ["lease_integrations.airflow.trigger",
                                   "lease_integrations.airflow.keeper_trigger"],
            }
        ],
        "task-decorators": [
            {"name": "leased", "class-name": "lease_integrations.airflow.decorator.leased_task"}
        ],
    }

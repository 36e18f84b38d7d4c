"""What a lease's holder meta says about an Airflow holder, so a person
running ``leasectl list`` sees which DAG run (and task try) holds it."""

from __future__ import annotations

import socket
from collections.abc import Mapping
from typing import Any


def run_meta(context: Mapping[str, Any]) -> dict[str, Any]:
    """The DAG run: dag_id, run_id, run_type and the worker's host."""
    ti = context["ti"]
    run_type = getattr(context.get("dag_run"), "run_type", None)
    return {
        "dag_id": ti.dag_id,
        "run_id": ti.run_id,
        "run_type": getattr(run_type, "value", run_type),
        "host": getattr(ti, "hostname", None) or socket.gethostname(),
    }


def task_meta(context: Mapping[str, Any]) -> dict[str, Any]:
    """The task try within the run, for a task-level lease."""
    ti = context["ti"]
    return {**run_meta(context), "task_id": ti.task_id, "try_number": ti.try_number,
            "map_index": ti.map_index}

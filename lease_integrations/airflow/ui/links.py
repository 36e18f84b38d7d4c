"""Where a holder's meta points: the DAG run or task instance in this Airflow
UI, or the Prefect flow run in a Prefect UI.

Airflow links are relative (``../dags/...`` from the plugin's pages, which
all live one level below the api-server's base URL), so they keep working
when Airflow is served under a path prefix.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote


def _part(value: object) -> str:
    """One path segment. A lone surrogate in stored meta has no UTF-8 form:
    it is spelt as its escape (no real DAG or run has one) instead of failing
    the whole page."""
    return quote(str(value), safe="", errors="backslashreplace")


def airflow_link(meta: dict[str, Any], up: str = "../") -> str | None:
    """The task instance (when meta names a task) or the DAG run, else the DAG."""
    dag_id = meta.get("dag_id")
    if not dag_id:
        return None
    url = f"{up}dags/{_part(dag_id)}"
    run_id = meta.get("run_id")
    if not run_id:
        return url
    url += f"/runs/{_part(run_id)}"
    task_id = meta.get("task_id")
    if not task_id:
        return url
    url += f"/tasks/{_part(task_id)}"
    map_index = meta.get("map_index")
    if isinstance(map_index, int) and map_index >= 0:
        url += f"/mapped/{map_index}"
    return url


def prefect_link(meta: dict[str, Any]) -> str | None:
    """The flow run in the Prefect UI named by ``[lease_integrations]
    prefect_ui_url`` (Airflow cannot know where a Prefect server lives)."""
    flow_run_id = meta.get("flow_run_id")
    if not flow_run_id:
        return None
    from airflow.configuration import conf

    base = str(conf.get("lease_integrations", "prefect_ui_url", fallback="") or "").rstrip("/")
    if not base.startswith(("http://", "https://")):
        return None
    return f"{base}/runs/flow-run/{_part(flow_run_id)}"


def airflow2_link(meta: dict[str, Any], up: str = "../") -> str | None:
    """The same places in the Airflow 2.11 UI: a DAG's grid, with the run
    and task (and map index) selected."""
    dag_id = meta.get("dag_id")
    if not dag_id:
        return None
    url = f"{up}dags/{_part(dag_id)}/grid"
    run_id, task_id, map_index = meta.get("run_id"), meta.get("task_id"), meta.get("map_index")
    query = [f"dag_run_id={_part(run_id)}"] if run_id else []
    if task_id:
        query.append(f"task_id={_part(task_id)}")
        if isinstance(map_index, int) and map_index >= 0:
            query.append(f"map_index={map_index}")
    return f"{url}?{'&'.join(query)}" if query else url

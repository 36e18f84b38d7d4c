"""Every difference between the supported Airflow releases, in one place.

The face is one code base for Airflow 2.11 and 3.x, as Airflow's own providers
are: a module that needs a name that moved, or a call that works differently,
takes it from here, so supporting another release means editing this file
alone. The newest spelling is tried first, so new Airflow never sees a
deprecation warning.

- Airflow 3 runs a task through the Task SDK (``airflow.sdk``: ``BaseOperator``,
  ``Connection``, ``conf``, the decorator base); tasks have no metadata-DB access
  and read run states through the supervisor.
- Airflow 2.11 runs a task under ``LocalTaskJob`` and the standard task runner,
  with the metadata DB at hand: ``airflow.models``, ``airflow.decorators``,
  ``airflow.operators.python`` (or the standard provider, when installed).
- Airflow 3.2 made ``airflow.sdk.exceptions`` the home of the task-facing
  exceptions; 3.0, 3.1 and 2.11 have them in ``airflow.exceptions``.
- How a try is failed without a retry from outside its ``execute`` (a
  superseded try, on the fail-stop ladder's thread): Airflow 3 tells the Task
  SDK supervisor (``TaskState``), 2.11 writes the metadata DB.
- The secrets backends a console process (``leasectl``) searches, and 3.3's
  access-denied answer from one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

try:  # Airflow >= 3.2
    from airflow.sdk.exceptions import (
        AirflowNotFoundException,
        AirflowSkipException,
        AirflowTaskTerminated,
    )
except ImportError:  # Airflow 2.11, 3.0, 3.1
    from airflow.exceptions import (  # type: ignore[no-redef]
        AirflowNotFoundException,
        AirflowSkipException,
        AirflowTaskTerminated,
    )

try:  # Airflow 3
    from airflow.sdk import BaseOperator
    from airflow.sdk.bases.decorator import DecoratedOperator, TaskDecorator, task_decorator_factory

    AIRFLOW_3 = True
except ImportError:  # Airflow 2.11
    from airflow.decorators.base import (  # type: ignore[no-redef]
        DecoratedOperator,
        TaskDecorator,
        task_decorator_factory,
    )
    from airflow.models import BaseOperator  # type: ignore[no-redef]

    AIRFLOW_3 = False

try:  # the standard provider: always on Airflow 3, optional on 2.11
    from airflow.providers.standard.operators.python import PythonOperator
except ImportError:  # Airflow 2.11 without it
    from airflow.operators.python import PythonOperator  # type: ignore[no-redef]


def airflow_conf() -> Any:
    """Airflow's configuration as the running task sees it."""
    if AIRFLOW_3:
        from airflow.sdk import conf
    else:
        from airflow.configuration import conf
    return conf


def get_connection(conn_id: str) -> Any:
    """Connection ``conn_id`` from wherever Airflow keeps it (secrets backends,
    ``AIRFLOW_CONN_*``, the metadata DB); ``AirflowNotFoundException`` if none."""
    if AIRFLOW_3:
        from airflow.sdk import Connection

        return Connection.get(conn_id)
    from airflow.models import Connection

    return Connection.get_connection_from_secrets(conn_id)


async def get_connection_async(conn_id: str) -> Any:
    """``get_connection`` for the triggerer's event loop."""
    if AIRFLOW_3:
        from airflow.sdk import Connection

        return await Connection.async_get(conn_id)
    # Airflow 2 has no async lookup; its secrets backends and DB session block.
    return await asyncio.to_thread(get_connection, conn_id)


def in_dag_test(context: Mapping[str, Any] | None = None) -> bool:
    """True when the task runs in ``dag.test()`` (``airflow dags test``), which
    runs a deferred task's trigger inline and the next task only after it ends.

    Airflow 3: the in-process supervisor. Airflow 2: no job runs the try
    (``LocalTaskJob`` sets the try's ``job_id``; ``dag.test()`` calls the task
    directly)."""
    if AIRFLOW_3:
        try:
            from airflow.sdk.execution_time import task_runner
            from airflow.sdk.execution_time.supervisor import InProcessSupervisorComms
        except ImportError:
            return False
        return isinstance(getattr(task_runner, "SUPERVISOR_COMMS", None), InProcessSupervisorComms)
    ti = (context or {}).get("ti")
    return ti is not None and getattr(ti, "job_id", None) is None


def run_states(dag_id: str, run_id: str) -> tuple[str, dict[str, str]] | None:
    """(the DAG run's state, {task_id: state}) for a trigger deciding whether
    its run is over, or None where no one can be asked: no Task SDK supervisor
    in this process (Airflow 3), or a metadata DB that has no such run (Airflow
    2, whose triggerer reads the DB itself)."""
    if AIRFLOW_3:
        try:
            from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

            state = RuntimeTaskInstance.get_dagrun_state(dag_id, run_id)
            states = RuntimeTaskInstance.get_task_states(dag_id, run_ids=[run_id])
        except (ImportError, NameError):
            return None
        return (str(getattr(state, "value", state)),
                {str(k): str(v) for k, v in dict(states.get(run_id, {})).items()})
    from airflow.models import DagRun, TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        run_state = session.query(DagRun.state).filter(
            DagRun.dag_id == dag_id, DagRun.run_id == run_id).scalar()
        if run_state is None:
            return None
        rows = session.query(TaskInstance.task_id, TaskInstance.map_index, TaskInstance.state).filter(
            TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id).all()
    tasks: dict[str, str] = {}
    for task_id, map_index, state in rows:
        name = task_id if map_index < 0 else f"{task_id}[{map_index}]"
        tasks[name] = str(getattr(state, "value", state))
    return str(getattr(run_state, "value", run_state)), tasks


def fail_try_without_retry(context: Mapping[str, Any]) -> bool:
    """Record the running try as FAILED, never up for retry, from any thread
    of the task's process. True when a supervisor outside this process now
    holds that state and reads it only if the process exits 0 (Airflow 3's
    task runner under the scheduler); False when the state is recorded
    already (``dag.test()``, Airflow 2.11's metadata DB). Raises when it
    cannot be done: the process then ends as a crash does."""
    from datetime import datetime, timezone

    ti = context["ti"]
    if AIRFLOW_3:
        from airflow.sdk.api.datamodels._generated import TaskInstanceState
        from airflow.sdk.execution_time import task_runner
        from airflow.sdk.execution_time.comms import TaskState
        from airflow.sdk.execution_time.supervisor import InProcessSupervisorComms

        comms = getattr(task_runner, "SUPERVISOR_COMMS", None)
        if comms is None:
            raise RuntimeError("no Task SDK supervisor to tell")
        fields: dict[str, Any] = {"state": TaskInstanceState.FAILED,
                                  "end_date": datetime.now(timezone.utc)}
        if "rendered_map_index" in TaskState.model_fields:
            fields["rendered_map_index"] = getattr(ti, "rendered_map_index", None)
        comms.send(TaskState(**fields))
        if isinstance(comms, InProcessSupervisorComms):
            # dag.test(): this process is the supervisor too, and ends before
            # dag.test() could record the outcome: record it now.
            comms.supervisor.update_task_state_if_needed()
            return False
        return True
    from airflow.utils.state import TaskInstanceState as State

    ti.set_state(State.FAILED)
    return False


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


__all__ = [
    "ACCESS_DENIED",
    "AIRFLOW_3",
    "AirflowNotFoundException",
    "AirflowSkipException",
    "AirflowTaskTerminated",
    "BaseOperator",
    "DecoratedOperator",
    "PythonOperator",
    "TaskDecorator",
    "airflow_conf",
    "fail_try_without_retry",
    "get_connection",
    "get_connection_async",
    "in_dag_test",
    "run_states",
    "secrets_backends",
    "task_decorator_factory",
]

"""One lease for a whole DAG run, declared once in the DAG file.

A lease per task (or a pool) still lets a second run slip in *between* the
tasks of the first: run A extracts, run B extracts, run A swaps B's half-built
index. The unit to protect is the run's critical section, so the lease is
taken before its first task and given back after its last::

    from lease_integrations.airflow.dag_run_lease import dag_run_lease

    with DAG("index_rebuild", schedule="@daily", ...):
        with dag_run_lease(lease_key="search-index", lease_ttl=120, on_busy="skip"):
            extract() >> build() >> swap()

Every task created inside the block is guarded; ``with_dag_run_lease([t1,
t2], ...)`` does the same for tasks that already exist. Both add an acquire
(setup), a keeper (deferred to the triggerer) and a release (teardown) task;
each guarded task adopts the run's lease for its ``execute``
(``LeaseLock.hold_adopted``), so the core's trust window and fail-stop apply
to it: a lost run lease runs the task's ``on_kill()`` (a ``BashOperator``
stops its command) and ends the task's process. How it works, the secret,
the keeper's stop rule and the guard's timing: ``docs/airflow/dag-run-lease.md``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

from lease_integrations import ConfigurationError, LeaseLost
from lease_integrations.core.supersede_guards import SupersedeGuard
from lease_integrations.keeper import stop_hook

from .connections import DEFAULT_CONN_ID
from .options import LeaseOptions
from .run_lease import (
    CONTEXT_KEY,
    DEFAULT_TASK_PREFIX,
    DagRunLease,
    dag_run_lease_of,
    leave_leftover_holds,
    open_holds,
)
from .run_lease_tasks import (
    RUN_LEASE_PRIORITY,
    AcquireDagRunLeaseOperator,
    KeepDagRunLeaseOperator,
    ReleaseDagRunLeaseOperator,
)
from .superseded import fail_superseded_try

log = logging.getLogger("lease_integrations")
Hook = Callable[..., Any]

__all__ = ["DagRunLease", "DagRunLeaseTasks", "dag_run_lease", "dag_run_lease_of",
           "with_dag_run_lease"]


@dataclass(frozen=True)
class DagRunLeaseTasks:
    """The three tasks the lease adds, for wiring anything else to them."""

    acquire: AcquireDagRunLeaseOperator
    keeper: KeepDagRunLeaseOperator
    release: ReleaseDagRunLeaseOperator


@contextmanager
def dag_run_lease(*, lease_key: str | None = None, lease_ttl: float = 60.0,
                  lease_heartbeat: float | None = None, lease_conn_id: str = DEFAULT_CONN_ID,
                  on_busy: str = "skip", wait_timeout: float | None = None,
                  deferrable: bool = False, poll_interval: float = 5.0,
                  supersede_if: SupersedeGuard | None = None,
                  task_prefix: str = DEFAULT_TASK_PREFIX) -> Iterator[DagRunLeaseTasks]:
    """Guard every task created in the block by one lease for the DAG run.

    Arguments as for ``LeasedPythonOperator``; the default key is
    ``airflow/<dag_id>/dag_run``, shared by every run of the DAG. With
    ``on_busy="supersede"`` a run replaces the run holding the key (guarded
    by ``supersede_if``, say ``only_newer("logical_date")``)."""
    tasks = _lease_tasks(task_prefix, lease_key=lease_key, lease_ttl=lease_ttl,
                         lease_heartbeat=lease_heartbeat, lease_conn_id=lease_conn_id,
                         on_busy=on_busy, wait_timeout=wait_timeout, deferrable=deferrable,
                         poll_interval=poll_interval, supersede_if=supersede_if)
    dag = tasks.acquire.dag
    before = set(dag.task_dict)
    yield tasks
    work = [task for task_id, task in dag.task_dict.items() if task_id not in before]
    _wire(tasks, work)


def with_dag_run_lease(tasks: Iterable[Any], *, lease_key: str | None = None,
                       lease_ttl: float = 60.0, lease_heartbeat: float | None = None,
                       lease_conn_id: str = DEFAULT_CONN_ID, on_busy: str = "skip",
                       wait_timeout: float | None = None, deferrable: bool = False,
                       poll_interval: float = 5.0, supersede_if: SupersedeGuard | None = None,
                       task_prefix: str = DEFAULT_TASK_PREFIX) -> DagRunLeaseTasks:
    """``dag_run_lease`` for tasks that already exist (operators or TaskFlow
    results); call it inside the DAG's context."""
    work = [getattr(task, "operator", task) for task in tasks]
    lease_tasks = _lease_tasks(task_prefix, lease_key=lease_key, lease_ttl=lease_ttl,
                               lease_heartbeat=lease_heartbeat, lease_conn_id=lease_conn_id,
                               on_busy=on_busy, wait_timeout=wait_timeout, deferrable=deferrable,
                               poll_interval=poll_interval, supersede_if=supersede_if)
    _wire(lease_tasks, work)
    return lease_tasks


def _lease_tasks(prefix: str, **arguments: Any) -> DagRunLeaseTasks:
    options = LeaseOptions(**arguments)  # checked at parse time: a bad DAG fails to import
    if not isinstance(prefix, str) or not prefix.strip():
        raise ConfigurationError(f"task_prefix must be a non-empty string, got {prefix!r}")
    first = {"priority_weight": RUN_LEASE_PRIORITY, "weight_rule": "absolute"}
    acquire = AcquireDagRunLeaseOperator(task_id=f"{prefix}_acquire", lease_options=options,
                                         lease_key=options.lease_key, **first)
    if not acquire.has_dag():  # an operator joins the DAG whose block is open
        raise ConfigurationError("dag_run_lease() must be used inside a DAG (with DAG(...): "
                                 "or a @dag function)")
    keeper = KeepDagRunLeaseOperator(task_id=f"{prefix}_keeper", acquire_task_id=acquire.task_id,
                                     retries=0, **first)
    release = ReleaseDagRunLeaseOperator(task_id=f"{prefix}_release",
                                         acquire_task_id=acquire.task_id)
    release.as_teardown(setups=acquire)
    acquire >> keeper
    return DagRunLeaseTasks(acquire, keeper, release)


def _wire(lease: DagRunLeaseTasks, work: list[Any]) -> None:
    if not work:
        raise ConfigurationError("dag_run_lease() guards no tasks: create the run's work "
                                 "tasks inside the block, or pass them to with_dag_run_lease()")
    ids = {task.task_id for task in work}
    own = {lease.acquire.task_id, lease.keeper.task_id, lease.release.task_id}
    for task in work:
        if task.task_id in own:
            continue
        if not ids & set(task.upstream_task_ids):
            lease.acquire >> task
        if not ids & set(task.downstream_task_ids):
            task >> lease.release
        _guard(task, lease.acquire.task_id)


def _guard(task: Any, acquire_task_id: str) -> None:
    partial = getattr(task, "partial_kwargs", None)
    if isinstance(partial, dict):  # a mapped task: each unmapped instance gets the hooks
        pre, post = guard_hooks(acquire_task_id, partial.get("pre_execute"),
                                partial.get("post_execute"))
        partial["pre_execute"], partial["post_execute"] = pre, post
        return
    pre, post = guard_hooks(acquire_task_id, task._pre_execute_hook, task._post_execute_hook)
    task._pre_execute_hook = pre
    task._post_execute_hook = post


# -- the work tasks' side: adopt the run's lease for the length of execute ------------------
def guard_hooks(acquire_task_id: str, previous_pre: Hook | None,
                previous_post: Hook | None) -> tuple[Hook, Hook]:
    """``pre_execute``/``post_execute`` hooks for one work task (chaining any the
    DAG author set): adopt the run's lease under fail-stop, so the core's
    trust window and loss ladder apply to the task as to any holder, with the
    task's own ``on_kill()`` as the ladder's stop hook."""

    def pre_execute(context: Any) -> None:
        leave_leftover_holds()
        info = dag_run_lease_of(_without_cached(context), acquire_task_id)
        if info is None:
            raise LeaseLost("<unknown>", None, f"no run lease in the XCom of {acquire_task_id!r}; "
                            "did the acquire task run in this DAG run?")
        with ExitStack() as stack:
            store = info.connect()
            stack.callback(store.close)
            try:
                lease = stack.enter_context(info.lock(store).hold_adopted(info.token,
                                                                          info.secret()))
            except LeaseLost as lost:
                log.error("not starting: the run's lease %s (token %s) is gone: %s", info.key,
                          info.token, lost.reason)
                raise
            # Last in, first run: on_kill stops the work, then a run superseded
            # by another has this try recorded FAILED, naming that run.
            stack.enter_context(stop_hook(fail_superseded_try(context, lambda: lease, store)))
            stack.enter_context(stop_hook(context["task"].on_kill))
            open_holds.append(stack.pop_all())
        log.info("the run holds lease %s with token %s", info.key, info.token)
        context[CONTEXT_KEY] = info
        context["lease"] = lease
        if previous_pre is not None:
            previous_pre(context)

    def post_execute(context: Any, result: Any = None) -> None:
        if open_holds:
            # Leaving raises LeaseLost if the lease was lost after the last
            # bytecode of execute: such a try did not succeed.
            open_holds.pop().close()
        if previous_post is not None:
            previous_post(context, result)

    return pre_execute, post_execute


def _without_cached(context: Mapping[str, Any]) -> Mapping[str, Any]:
    """A retry must re-read XCom, never reuse a lease a previous hook left behind."""
    return {k: v for k, v in context.items() if k != CONTEXT_KEY}

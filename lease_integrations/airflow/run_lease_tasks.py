"""The three tasks behind ``dag_run_lease``: acquire (setup), keep (deferred
to the triggerer) and release (teardown). The lease outlives each of their
processes, so every process after the first adopts it through the core.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from typing import Any

from lease_integrations import LeaseBusy, LeaseLost, LeaseStore, connect
from lease_integrations.core import LeaseError

from ._compat import BaseOperator, in_dag_test
from .busy import on_busy, remaining_wait, resumed_deadline
from .connections import resolve_store_url
from .keeper_trigger import DagRunLeaseKeeperTrigger
from .meta import run_meta
from .options import LeaseOptions
from .run_lease import (
    XCOM_KEY,
    DagRunLease,
    acquire_for_run,
    dag_run_lease_of,
    leave_leftover_holds,
    release_run_lease,
    run_secret,
    shareable_url,
)
from .run_supersede import supersede_run

#: With ``weight_rule="absolute"``: the lease's own tasks are scheduled before
#: any work task competing for the same pool or parallelism (a keeper queued
#: behind the work would start when the ttl is running out).
RUN_LEASE_PRIORITY = 1_000_000


def run_key(dag_id: str) -> str:
    """One key per DAG, shared by every run of it whatever its type."""
    return f"airflow/{dag_id}/dag_run"


class AcquireDagRunLeaseOperator(BaseOperator):  # type: ignore[misc]
    """Take the run's lease and hand it (token, nonce: never the secret) to
    the run via XCom. ``on_busy`` as for ``LeasedPythonOperator``; with
    ``supersede`` this run replaces the run holding the key (its guarded
    tasks are stopped, its keeper fails), once ``supersede_if`` allows it."""

    template_fields: Sequence[str] = ("lease_key",)
    ui_color = "#d9ead3"

    def __init__(self, *, lease_options: LeaseOptions, lease_key: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.lease_options = lease_options
        self.lease_key = lease_key
        self._deadline: str | None = None

    def execute(self, context: Any) -> None:
        url = resolve_store_url(self.lease_options.lease_conn_id)
        store = connect(url)
        try:
            self._acquire(store, self.lease_key or run_key(self.dag_id), context,
                          shareable_url(url))
        finally:
            store.close()

    def execute_after_wait(self, context: Any, event: dict[str, Any] | None = None) -> None:
        """Resumed by ``LeaseReleasedTrigger``; defers again if another run won."""
        self._deadline = resumed_deadline(event)
        self.execute(context)

    def _acquire(self, store: LeaseStore, key: str, context: Any, store_url: str | None) -> None:
        options = self.lease_options
        heartbeat = options.lock_for(key, store).heartbeat  # validates the rendered key
        ti = context["ti"]
        nonce = secrets.token_hex(8)
        secret = run_secret(key, ti.dag_id, ti.run_id, nonce)
        meta = {**run_meta(context), "scope": "dag_run"}
        holder = f"dagrun:{ti.dag_id}:{ti.run_id}"
        remaining = remaining_wait(options, self._deadline)
        deadline = None if remaining is None else time.monotonic() + remaining
        first = True

        def granted(token: int) -> None:
            lease = DagRunLease(key=key, token=token, ttl=options.lease_ttl,
                                heartbeat=heartbeat, conn_id=options.lease_conn_id,
                                dag_id=ti.dag_id, run_id=ti.run_id, nonce=nonce,
                                store_url=store_url)
            ti.xcom_push(key=XCOM_KEY, value=lease.to_xcom())
            self.log.info("the run holds lease %s with token %s (store %s)", key,
                          lease.token, store.url)

        while True:
            result = acquire_for_run(store, key, holder, secret, options.lease_ttl, meta)
            if result.granted and result.record is not None:
                granted(result.record.token)
                return
            busy = LeaseBusy(key, result.record)
            if first and options.on_busy == "supersede":
                self.log.warning("superseding the run that holds it: %s", busy)
                try:
                    token = supersede_run(options.lock_for(key, store), holder, secret, meta,
                                          options.supersede_if)
                except LeaseBusy as refused:  # SupersedeRefused: the guard said no
                    self.log.error("not superseded, failing the whole run: %s", refused)
                    raise
                granted(token)
                return
            if first:
                on_busy(self, options, busy, remaining, self._deadline, "the whole run")
                first = False
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                self.log.error("gave up waiting: %s", busy)
                raise busy
            expires_in = busy.record.expires_in if busy.record else None
            delay = min(options.poll_interval, max(0.05, expires_in or 0.05))
            store.wait_for_release(key, delay if left is None else min(delay, left))


class KeepDagRunLeaseOperator(BaseOperator):  # type: ignore[misc]
    """Defers at once: the triggerer keeps the run's lease until the run gives
    it back or ends (success), or it is lost (failure, so the run fails)."""

    ui_color = "#fff2cc"

    def __init__(self, *, acquire_task_id: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.acquire_task_id = acquire_task_id

    def execute(self, context: Any) -> None:
        info = dag_run_lease_of(context, self.acquire_task_id)
        if info is None:
            raise LeaseLost("<unknown>", None, f"no run lease in the XCom of {self.acquire_task_id!r}")
        if in_dag_test(context):
            # dag.test() runs a trigger inline and the next task only after it
            # ends: a keeper would block the run it keeps. Without a triggerer
            # the work tasks' own adoption keeps the lease while they run.
            self.log.warning("dag.test(): no triggerer runs beside the tasks, so lease %s "
                             "(token %s) is renewed only while a guarded task runs", info.key,
                             info.token)
            return
        self.log.info("handing lease %s (token %s) to the triggerer, renewed every %.1f s",
                      info.key, info.token, info.heartbeat)
        self.defer(trigger=DagRunLeaseKeeperTrigger(lease=info.to_xcom(), keeper_task_id=self.task_id),
                   method_name="execute_complete")

    def execute_complete(self, context: Any, event: dict[str, Any] | None = None) -> None:
        """Not reached in normal operation (the trigger ends this task itself)."""


class ReleaseDagRunLeaseOperator(BaseOperator):  # type: ignore[misc]
    """The teardown: give the lease back iff the store still has this run's
    token; a lease the run no longer holds is left untouched. A store blip is
    retried for up to one ttl (teardowns have no retries by default); the
    keeper releases it too once the run has ended, so the lease never
    outlives its run."""

    ui_color = "#f4cccc"

    def __init__(self, *, acquire_task_id: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.acquire_task_id = acquire_task_id

    def execute(self, context: Any) -> None:
        leave_leftover_holds()
        info = dag_run_lease_of(context, self.acquire_task_id)
        if info is None:
            self.log.info("this run took no lease; nothing to release")
            return
        deadline = time.monotonic() + info.ttl
        while True:
            try:
                self.log.info(release_run_lease(info))
                return
            except LeaseError as exc:  # StoreUnavailable and friends: the store blipped
                if time.monotonic() >= deadline:
                    raise
                self.log.warning("releasing run lease %s failed (%s); retrying", info.key, exc)
                time.sleep(min(1.0, info.heartbeat / 4))

"""The three tasks behind ``dag_run_lease``: acquire (setup), keep (deferred
to the triggerer) and release (teardown).

They talk to the store through the protocol alone (acquire, renew, release
with an explicit holder and token), because the lease outlives each of these
processes: the acquire task exits holding it, the keeper's trigger renews it
in another process, and the teardown gives it back in a third.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow.sdk import BaseOperator

from lease_integrations import LeaseBusy, LeaseLost, LeaseStore, connect

from ._compat import AirflowSkipException
from .connections import DEFAULT_CONN_ID, resolve_store_url
from .keeper_trigger import DagRunLeaseKeeperTrigger
from .options import LeaseOptions
from .run_lease_info import XCOM_KEY, DagRunLease, dag_run_lease_of, run_holder_meta, shareable_url
from .trigger import LeaseReleasedTrigger


def run_key(dag_id: str) -> str:
    """One key per DAG, shared by every run of it whatever its type."""
    return f"airflow/{dag_id}/dag_run"


class AcquireDagRunLeaseOperator(BaseOperator):  # type: ignore[misc]
    """Take the run's lease and hand it (holder and token) to the run via XCom.

    ``on_busy``: ``skip`` (this task is skipped, so every work task is too,
    and the log names the holder), ``fail``, or ``wait`` (``deferrable=True``
    frees the worker slot while waiting)."""

    template_fields: Sequence[str] = ("lease_key",)
    ui_color = "#d9ead3"

    def __init__(self, *, lease_options: LeaseOptions, lease_key: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.lease_options = lease_options
        self.lease_key = lease_key
        self._deadline: str | None = None

    def execute(self, context: Any) -> None:
        key = self.lease_key or run_key(self.dag_id)
        url = resolve_store_url(self.lease_options.lease_conn_id)
        store = connect(url)
        try:
            self._acquire(store, key, context, shareable_url(url))
        finally:
            store.close()

    def execute_after_wait(self, context: Any, event: dict[str, Any] | None = None) -> None:
        """Resumed by ``LeaseReleasedTrigger``; defers again if another run won."""
        self._deadline = (event or {}).get("deadline")
        self.execute(context)

    def _acquire(self, store: LeaseStore, key: str, context: Any, store_url: str | None) -> None:
        options = self.lease_options
        lock = options.lock_for(key, store)  # validates the rendered key
        heartbeat = lock.heartbeat
        holder = f"dagrun:{secrets.token_hex(8)}"
        meta = run_holder_meta(context)
        remaining = self._remaining_wait()
        deadline = None if remaining is None else time.monotonic() + remaining
        first = True
        while True:
            result = store.acquire(key, holder, options.lease_ttl, meta)
            if result.granted and result.record is not None:
                lease = DagRunLease(key=key, holder=holder, token=result.record.token,
                                    ttl=options.lease_ttl, heartbeat=heartbeat,
                                    conn_id=options.lease_conn_id, store_url=store_url)
                context["ti"].xcom_push(key=XCOM_KEY, value=lease.to_xcom())
                self.log.info("the run holds lease %s with token %s as %s (store %s)", key,
                              lease.token, holder, store.url)
                return
            busy = LeaseBusy(key, result.record)
            if first:
                self._on_busy(busy, key, remaining)
                first = False
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                self.log.error("gave up waiting: %s", busy)
                raise busy
            expires_in = busy.record.expires_in if busy.record else None
            delay = min(options.poll_interval, max(0.05, expires_in or 0.05))
            store.wait_for_release(key, delay if left is None else min(delay, left))

    def _on_busy(self, busy: LeaseBusy, key: str, remaining: float | None) -> None:
        on_busy = self.lease_options.on_busy
        if on_busy == "skip":
            self.log.info("skipping the whole run: %s", busy)
            raise AirflowSkipException(f"skipped: {busy}")
        if on_busy == "fail":
            self.log.error("failing the run: %s", busy)
            raise busy
        if self.lease_options.deferrable and (remaining is None or remaining > 0):
            self.log.info("deferring until it is free: %s", busy)
            deadline = self._deadline
            if deadline is None and remaining is not None:
                deadline = (datetime.now(timezone.utc) + timedelta(seconds=remaining)).isoformat()
            self.defer(
                trigger=LeaseReleasedTrigger(lease_key=key,
                                             lease_conn_id=self.lease_options.lease_conn_id,
                                             poll_interval=self.lease_options.poll_interval,
                                             deadline=deadline),
                method_name="execute_after_wait",
                timeout=None if remaining is None else timedelta(seconds=remaining),
            )
        self.log.info("waiting %s for it: %s",
                      "as long as it takes" if remaining is None else f"up to {remaining:.1f} s", busy)

    def _remaining_wait(self) -> float | None:
        if self._deadline is None:
            return self.lease_options.wait_timeout
        left = (datetime.fromisoformat(self._deadline) - datetime.now(timezone.utc)).total_seconds()
        return max(0.0, left)


class KeepDagRunLeaseOperator(BaseOperator):  # type: ignore[misc]
    """Defers at once: the triggerer renews the run's lease until the release
    task gives it back (success) or it is lost (failure, so the run fails)."""

    ui_color = "#fff2cc"

    def __init__(self, *, acquire_task_id: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.acquire_task_id = acquire_task_id

    def execute(self, context: Any) -> None:
        info = dag_run_lease_of(context, self.acquire_task_id)
        if info is None:
            raise LeaseLost("<unknown>", None, f"no run lease in the XCom of {self.acquire_task_id!r}")
        if _in_dag_test():
            # dag.test() runs a trigger inline and the next task only after it
            # ends: a keeper would block the run it keeps. Without a triggerer
            # beside the tasks the lease simply lives its ttl.
            self.log.warning("dag.test(): no triggerer runs beside the tasks, so lease %s "
                             "(token %s) is not renewed; it lasts lease_ttl=%.0f s", info.key,
                             info.token, info.ttl)
            return
        self.log.info("handing lease %s (token %s) to the triggerer, renewed every %.1f s",
                      info.key, info.token, info.heartbeat)
        self.defer(
            trigger=DagRunLeaseKeeperTrigger(lease_key=info.key, holder=info.holder,
                                             token=info.token, ttl=info.ttl,
                                             heartbeat=info.heartbeat, lease_conn_id=info.conn_id,
                                             store_url=info.store_url),
            method_name="execute_complete",
        )

    def execute_complete(self, context: Any, event: dict[str, Any] | None = None) -> None:
        """Not reached in normal operation (the trigger ends this task itself with
        a success or failure event); kept so a plain event still ends it right."""
        event = event or {}
        key, token = event.get("key", "?"), event.get("token")
        if event.get("status") == "released":
            self.log.info("run lease %s (token %s) released by the run after %s renewals", key,
                          token, event.get("renewals"))
            return
        self.log.error("run lease %s (token %s) lost: %s", key, token, event.get("reason"))
        raise LeaseLost(str(key), token, str(event.get("reason") or "the keeper could not renew"))


def _in_dag_test() -> bool:
    """True when the task runs in ``dag.test()``'s in-process supervisor."""
    try:
        from airflow.sdk.execution_time import task_runner
        from airflow.sdk.execution_time.supervisor import InProcessSupervisorComms
    except ImportError:
        return False
    return isinstance(getattr(task_runner, "SUPERVISOR_COMMS", None), InProcessSupervisorComms)


class ReleaseDagRunLeaseOperator(BaseOperator):  # type: ignore[misc]
    """The teardown: give the lease back iff the store still has our holder and
    token. A lease this run no longer holds (expired, broken, now someone
    else's) is left untouched."""

    ui_color = "#f4cccc"

    def __init__(self, *, acquire_task_id: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.acquire_task_id = acquire_task_id

    def execute(self, context: Any) -> None:
        info = dag_run_lease_of(context, self.acquire_task_id)
        if info is None:
            self.log.info("this run took no lease; nothing to release")
            return
        store = info.connect()
        try:
            if store.release(info.key, info.holder, info.token):
                self.log.info("released run lease %s (token %s)", info.key, info.token)
                return
            record = store.get(info.key)
        finally:
            store.close()
        self.log.warning("run lease %s (token %s) was no longer this run's (%s); left untouched",
                         info.key, info.token, info.why_not_current(record))


__all__ = ["DEFAULT_CONN_ID", "AcquireDagRunLeaseOperator", "KeepDagRunLeaseOperator",
           "ReleaseDagRunLeaseOperator", "run_key"]

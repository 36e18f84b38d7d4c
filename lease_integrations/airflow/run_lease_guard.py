"""The work tasks' side of a DAG run's lease: check at start, watch while running.

The keeper in the triggerer renews the lease, but a task must not trust that
blindly: a worker that picks a task up after the lease was broken, expired or
taken over must not start it, and a task already running when that happens
must stop. So every work task, before ``execute``:

1. reads the run's lease from the acquire task's XCom and the record from the
   store, and raises ``LeaseLost`` unless the store still has that holder and
   token unexpired (the task fails, so the run's later tasks never start);
2. puts the lease in the context (``context["dag_run_lease"]``, and
   ``context["lease"]`` with ``key``, ``token``, ``check()`` for the fencing
   guard) and starts a watcher thread that re-reads the record every
   heartbeat; when it is no longer ours, or the store has been unreachable
   past the trust window (the store's own remaining time at the last good
   read, minus a margin), the task is interrupted with ``LeaseLost``.

The watcher only reads: renewing is the keeper's job, so a dead keeper shows
up as an expired lease here instead of being papered over by a busy task.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from lease_integrations import Lease, LeaseLost, LeaseRecord, LeaseStore
from lease_integrations.core import interrupt

from .run_lease_info import CONTEXT_KEY, DagRunLease, dag_run_lease_of

log = logging.getLogger("lease_integrations")

Hook = Callable[..., Any]


class RunLeaseWatch:
    """One running task's watch on the run's lease (started by ``start``)."""

    def __init__(self, info: DagRunLease, store: LeaseStore, record: LeaseRecord) -> None:
        self.info = info
        self.store = store
        # A core Lease stands for the run's lease in this task: its trust window
        # follows the store's remaining time, its loss flag drives the interrupt.
        self.lease = Lease(record, ttl=info.ttl, margin=info.ttl / 10, attempt_started=0.0)
        self._trust(time.monotonic(), record)
        self._stop = threading.Event()
        self._block: interrupt.Block | None = None
        self._thread: threading.Thread | None = None

    def _trust(self, read_started: float, record: LeaseRecord) -> None:
        # renewed(t) trusts until t + ttl - margin: pick t so that this ends
        # margin before the store's own expiry as of this read.
        remaining = record.expires_in or 0.0
        self.lease.renewed(read_started + remaining - self.info.ttl)

    def start(self) -> None:
        self._block = interrupt.arm(self.lease)
        self._thread = threading.Thread(target=self._watch, name="dag-run-lease-watch",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        block, self._block = self._block, None
        self.lease.mark_released()  # stops callbacks: the task is past its work
        if block is not None:
            interrupt.disarm(block)
        self.store.close()

    def _watch(self) -> None:
        interval = max(0.05, self.info.heartbeat)
        while not self._stop.wait(interval):
            started = time.monotonic()
            try:
                record = self.store.get(self.info.key)
            except Exception as exc:
                if time.monotonic() >= self.lease.trusted_until:
                    self.lease.mark_lost(f"store unreachable past the trust window ({exc!r})")
                    return
                log.warning("reading run lease %s failed (%r); retrying", self.info.key, exc)
                continue
            if self._stop.is_set():
                return
            if not self.info.is_current(record):
                self.lease.mark_lost(self.info.why_not_current(record))
                return
            assert record is not None
            self._trust(started, record)


def guard_hooks(acquire_task_id: str, previous_pre: Hook | None,
                previous_post: Hook | None) -> tuple[Hook, Hook]:
    """``pre_execute``/``post_execute`` hooks for one work task (chaining any the
    DAG author set)."""
    watches: dict[int, RunLeaseWatch] = {}

    def pre_execute(context: Any) -> None:
        watch = check_run_lease(context, acquire_task_id)
        watches[id(context)] = watch
        watch.start()
        if previous_pre is not None:
            previous_pre(context)

    def post_execute(context: Any, result: Any = None) -> None:
        watch = watches.pop(id(context), None)
        if watch is not None:
            watch.stop()
            watch.lease.check()  # lost between the last bytecode and here: not a success
        if previous_post is not None:
            previous_post(context, result)

    return pre_execute, post_execute


def check_run_lease(context: Any, acquire_task_id: str) -> RunLeaseWatch:
    """Raise ``LeaseLost`` unless the run still holds its lease; else a watch
    (not yet started) and the lease placed in the context."""
    info = dag_run_lease_of(_without_cached(context), acquire_task_id)
    if info is None:
        raise LeaseLost("<unknown>", None, f"no run lease in the XCom of {acquire_task_id!r}; "
                        "did the acquire task run in this DAG run?")
    store = info.connect()
    try:
        record = store.get(info.key)
    except BaseException:
        store.close()
        raise
    if not info.is_current(record):
        store.close()
        reason = info.why_not_current(record)
        log.error("not starting: the run's lease %s (token %s) is gone: %s", info.key, info.token,
                  reason)
        raise LeaseLost(info.key, info.token, reason)
    assert record is not None
    log.info("the run holds lease %s with token %s (expires in %.1f s)", info.key, info.token,
             record.expires_in or 0.0)
    watch = RunLeaseWatch(info, store, record)
    context[CONTEXT_KEY] = info
    context["lease"] = watch.lease
    return watch


def _without_cached(context: Mapping[str, Any]) -> Mapping[str, Any]:
    """A retry must re-read XCom, never reuse a lease a previous hook left behind."""
    return {k: v for k, v in context.items() if k != CONTEXT_KEY}

"""``leased()``: a lease around a block inside a task, for flows where only
one step must be exclusive (the rest may overlap freely).

    @task
    def publish(report):
        with leased("publish-reports", ttl=60) as lease:
            write(report, fencing_token=lease.token)

Works with ``async with`` too. A busy lease raises ``LeaseBusy`` (naming the
holder) after ``wait`` seconds, so the task fails or retries under Prefect's
own task retry settings; a lost lease ends the process (``on_lost="exit"``,
reporting the flow run Crashed first) or, with ``"check"``, ends the block
with ``LeaseLost``.
Inside the block ``current_lease()`` returns this lease.
"""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack, ExitStack
from types import TracebackType
from typing import Any

from lease_integrations import ConfigurationError, Lease, LeaseBusy, LeaseLock
from lease_integrations.core import (
    ON_LOST_POLICIES,
    validate_heartbeat,
    validate_key,
    validate_policy,
    validate_ttl,
    validate_wait,
)
from lease_integrations.keeper import stop_hook

from .context import active_flow_run_id, bound, run_meta
from .crash import crash_reporter
from .events import LeaseEvents
from .store import StoreSource


class leased:  # lower case: used like a function, `with leased("key"):`
    """Hold ``key`` for the enclosed block (sync or async)."""

    def __init__(
        self, key: str, ttl: float = 30.0, *, store: Any = None, wait: float | None = 0,
        on_lost: str = "exit", heartbeat: float | None = None,
    ) -> None:
        self.key = validate_key(key)
        self.ttl = validate_ttl(ttl)
        self.heartbeat = validate_heartbeat(heartbeat, self.ttl)
        self.wait = validate_wait(wait)
        self.on_lost = validate_policy(on_lost, ON_LOST_POLICIES, "on_lost")
        self.source = StoreSource(store)
        self._sync_stack: ExitStack | None = None
        self._async_stack: AsyncExitStack | None = None

    def _lock(self) -> LeaseLock:
        return LeaseLock(self.source.open(), self.key, self.ttl, heartbeat=self.heartbeat,
                         on_lost=self.on_lost, meta=run_meta())

    def __enter__(self) -> Lease:
        if self._sync_stack is not None or self._async_stack is not None:
            raise ConfigurationError(f"leased({self.key!r}) is already entered; make a new one")
        events = LeaseEvents(self.key, active_flow_run_id(), self.on_lost)
        with ExitStack() as stack:
            stack.push(events.after_hold)  # runs once the hold has ended: `released`
            lock = self._lock()
            try:
                lease = stack.enter_context(lock.hold(self.wait))
            except LeaseBusy as busy:  # after `wait` seconds: the block raises it
                events.busy(busy, "failed")
                raise
            events.acquired(lease)
            stack.enter_context(bound(lease, active_flow_run_id()))
            stack.enter_context(stop_hook(crash_reporter(lease, active_flow_run_id(), events,
                                                         lock.store)))
            self._sync_stack = stack.pop_all()
        return lease

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        stack, self._sync_stack = self._sync_stack, None
        assert stack is not None
        return stack.__exit__(kind, exc, tb)

    async def __aenter__(self) -> Lease:
        if self._sync_stack is not None or self._async_stack is not None:
            raise ConfigurationError(f"leased({self.key!r}) is already entered; make a new one")
        lock = await asyncio.to_thread(self._lock)
        events = LeaseEvents(self.key, active_flow_run_id(), self.on_lost)
        async with AsyncExitStack() as stack:
            stack.push(events.after_hold)  # runs once the hold has ended: `released`
            try:
                lease = await stack.enter_async_context(lock.hold_async(self.wait))
            except LeaseBusy as busy:
                events.busy(busy, "failed")
                raise
            events.acquired(lease)
            stack.enter_context(bound(lease, active_flow_run_id()))
            stack.enter_context(stop_hook(crash_reporter(lease, active_flow_run_id(), events,
                                                         lock.store)))
            self._async_stack = stack.pop_all()
        return lease

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        stack, self._async_stack = self._async_stack, None
        assert stack is not None
        return await stack.__aexit__(kind, exc, tb)

"""``@leased_flow``: a Prefect flow that runs only while it holds a lease.

The lease is taken *inside* the flow function, not in ``Flow.__call__``:
deployed runs (``serve()``, ``deploy()``, workers) call ``flow.fn`` through
the flow engine and never pass through ``__call__``. So the decorator wraps
the user's function (``functools.wraps`` keeps its signature, hence the same
parameter schema) and hands the wrapper to Prefect's own ``flow(...)``: the
result is a real ``Flow`` with every ``@flow`` argument passed through.

Inside the run, a busy lease ends the run as Prefect states do: ``skip``
returns a ``Cancelled`` state naming the holder (like Prefect's CANCEL_NEW),
``fail`` raises ``LeaseBusy`` (the run is Failed with the holder in the
message), ``wait`` waits (``wait_timeout`` seconds, or for ever) and then
fails, ``supersede`` replaces the holder (``keeper/supersede``: its lease is
broken, its process stopped and its run reported Cancelled naming this one,
before this run's body starts), if ``supersede_if(holder_meta, new_meta)``
allows it; a refusal fails this run (``SupersedeRefused``). The meta each
run writes carries what guards compare (``run_fields``). A lost lease
(``on_lost="exit"``, the default) reports the run (and the flow runs that
called it in this process) Crashed with the reason (Cancelled, naming the
new run, when it was superseded) and ends the process running it: the body,
the task runs it submitted to a thread-pool runner, and every process it
started (``lease_integrations.keeper.failstop``). Deployed runs get a process of their
own from the runner or worker, so nothing else is stopped with it; a flow
called in-process ends its caller too (``on_lost="check"`` for code that must
outlive a loss: the run then ends Failed at the end of the body, never
Completed; async flows also have ``"cancel"``).

Each run emits Prefect events for its lease (``events``): acquired, busy
(skipped, waiting, failed, timed out), lost with the reason (sent before
fail-stop ends the process) and released.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import Callable
from contextlib import AsyncExitStack, ExitStack
from typing import Any, TypeVar, overload

from prefect.flows import Flow

from lease_integrations import ConfigurationError, Lease, LeaseBusy, LeaseLock, LeaseStore
from lease_integrations.core import (
    ON_BUSY_POLICIES,
    validate_heartbeat,
    validate_on_lost,
    validate_policy,
    validate_ttl,
    validate_wait,
)
from lease_integrations.core.supersede_guards import SupersedeGuard, validate_guard
from lease_integrations.keeper import stop_hook

from .annotate import annotate_async, annotate_sync
from .context import bound, run_meta
from .crash import crash_reporter
from .events import LeaseEvents
from .keys import KeyTemplate, default_key
from .quiet import SKIP_PREFIX, quiet_skips
from .run_fields import run_fields
from .store import StoreSource

F = TypeVar("F", bound=Callable[..., Any])

#: Every argument ``@flow`` takes, so a typo is a ConfigurationError here
#: rather than a TypeError from deep inside Prefect.
FLOW_ARGUMENTS = frozenset(inspect.signature(Flow.__init__).parameters) - {"self", "fn"}

#: ``on_busy`` for flows: the core's policies and ``supersede``.
FLOW_ON_BUSY = tuple(dict.fromkeys((*ON_BUSY_POLICIES, "supersede")))


class LeasePlan:
    """The lease settings of one flow, validated at decoration time and
    turned into a ``LeaseLock`` per run."""

    def __init__(
        self, fn: Callable[..., Any], flow_name: str, *, key: str | None, ttl: float,
        store: Any, on_busy: str, on_lost: str, wait_timeout: float | None,
        heartbeat: float | None, annotate: bool, supersede_if: SupersedeGuard | None = None,
    ) -> None:
        self.ttl = validate_ttl(ttl)
        self.heartbeat = validate_heartbeat(heartbeat, self.ttl)
        self.on_busy = validate_policy(on_busy, FLOW_ON_BUSY, "on_busy")
        if supersede_if is not None and self.on_busy != "supersede":
            named = getattr(supersede_if, "__name__", None) or repr(supersede_if)
            raise ConfigurationError(
                f"supersede_if={named} only applies to on_busy='supersede' "
                f"(on_busy is {self.on_busy!r})")
        self.guard = validate_guard(supersede_if)
        self.supersede = self.on_busy == "supersede"
        self.fn = fn
        self.on_lost = validate_on_lost(on_lost, runs_async=inspect.iscoroutinefunction(fn),
                                        subject="flows")
        if wait_timeout is not None and self.on_busy != "wait":
            raise ConfigurationError(
                f"wait_timeout={wait_timeout!r} only applies to on_busy='wait' "
                f"(on_busy is {self.on_busy!r})"
            )
        self.wait: float | None = 0.0
        if self.on_busy == "wait":
            self.wait = validate_wait(wait_timeout)
        if not isinstance(annotate, bool):
            raise ConfigurationError(f"annotate must be True or False, got {annotate!r}")
        self.annotate = annotate
        self.flow_name = flow_name
        self.key = KeyTemplate(key if key is not None else default_key(flow_name),
                               inspect.signature(fn), flow_name)
        self.source = StoreSource(store)

    def lock_for(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> LeaseLock:
        """Everything that may touch the outside world (the store, a block),
        done when a run starts, never at import."""
        fields = run_fields(self.fn, args, kwargs)
        if not self.supersede:  # only a guard needs them: kept out of other flows' history
            fields.pop("parameters", None)
        return LeaseLock(
            self.source.open(), self.key.render(args, kwargs), self.ttl,
            heartbeat=self.heartbeat, on_lost=self.on_lost, meta={**run_meta(), **fields},
        )

    def events_for(self, lock: LeaseLock, flow_run_id: str | None) -> LeaseEvents:
        return LeaseEvents(lock.key, flow_run_id, self.on_lost)

    def busy_outcome(self, busy: LeaseBusy, events: LeaseEvents) -> Any:
        from prefect.states import Cancelled

        if self.on_busy == "skip":
            events.busy(busy, "skipped")
            quiet_skips()
            _logger().info("Skipping this run: %s", busy)
            return Cancelled(message=f"{SKIP_PREFIX}{busy}")
        if self.on_busy == "wait":
            events.busy(busy, "timed-out")
            _logger().error("Gave up waiting after %s s: %s", self.wait, busy)
        elif self.supersede:
            events.busy(busy, "refused")
            _logger().error("Not superseding the holder: %s", busy)
        else:
            events.busy(busy, "failed")
        raise busy

    def waiting(self, busy: LeaseBusy, events: LeaseEvents) -> None:
        events.busy(busy, "waiting")
        limit = "as long as it takes" if self.wait is None else f"up to {self.wait:g} s"
        _logger().info("Waiting for lease %r (%s): %s", busy.key, limit, busy)

    def acquired(self, lease: Lease, store: LeaseStore) -> None:
        _logger().info(
            "Holding lease %r with fencing token %s as %s (store: %s)",
            lease.key, lease.token, lease.holder, self.source.describe(store),
        )


def _logger() -> Any:
    """The run's logger (its lines reach the Prefect UI); outside a run, as
    when a unit test calls ``my_flow.fn()``, the library's own logger."""
    from prefect.exceptions import MissingContextError
    from prefect.logging import get_run_logger

    try:
        return get_run_logger()
    except MissingContextError:
        return logging.getLogger("lease_integrations")


def _flow_run_context() -> Any:
    from prefect.context import FlowRunContext

    return FlowRunContext.get()


def _run_id(ctx: Any) -> str | None:
    return str(ctx.flow_run.id) if ctx is not None and ctx.flow_run is not None else None


def _sync_wrapper(fn: Callable[..., Any], plan: LeasePlan) -> Callable[..., Any]:
    @functools.wraps(fn)
    def run_leased(*args: Any, **kwargs: Any) -> Any:
        lock = plan.lock_for(args, kwargs)
        ctx = _flow_run_context()
        events = plan.events_for(lock, _run_id(ctx))
        with ExitStack() as stack:
            stack.push(events.after_hold)  # runs once the hold has ended: `released`
            try:
                try:
                    lease = stack.enter_context(
                        lock.hold(0, supersede=plan.supersede, supersede_if=plan.guard))
                except LeaseBusy as first:
                    if plan.on_busy != "wait":
                        raise
                    plan.waiting(first, events)
                    lease = stack.enter_context(lock.hold(plan.wait))
            except LeaseBusy as busy:
                return plan.busy_outcome(busy, events)
            events.acquired(lease)
            stack.enter_context(bound(lease, _run_id(ctx)))
            stack.enter_context(stop_hook(crash_reporter(lease, _run_id(ctx), events,
                                                         lock.store)))
            plan.acquired(lease, lock.store)
            if plan.annotate and ctx is not None:
                annotate_sync(ctx, lease)
            return fn(*args, **kwargs)

    return run_leased


def _async_wrapper(fn: Callable[..., Any], plan: LeasePlan) -> Callable[..., Any]:
    @functools.wraps(fn)
    async def run_leased(*args: Any, **kwargs: Any) -> Any:
        # The store and a block may do blocking I/O: keep the event loop free.
        lock = await asyncio.to_thread(plan.lock_for, args, kwargs)
        ctx = _flow_run_context()
        events = plan.events_for(lock, _run_id(ctx))
        async with AsyncExitStack() as stack:
            stack.push(events.after_hold)  # runs once the hold has ended: `released`
            try:
                try:
                    lease = await stack.enter_async_context(
                        lock.hold_async(0, supersede=plan.supersede, supersede_if=plan.guard))
                except LeaseBusy as first:
                    if plan.on_busy != "wait":
                        raise
                    plan.waiting(first, events)
                    lease = await stack.enter_async_context(lock.hold_async(plan.wait))
            except LeaseBusy as busy:
                return plan.busy_outcome(busy, events)
            events.acquired(lease)
            stack.enter_context(bound(lease, _run_id(ctx)))
            stack.enter_context(stop_hook(crash_reporter(lease, _run_id(ctx), events,
                                                         lock.store)))
            plan.acquired(lease, lock.store)
            if plan.annotate and ctx is not None:
                await annotate_async(ctx, lease)
            return await fn(*args, **kwargs)

    return run_leased


def _check_function(fn: Any) -> None:
    if isinstance(fn, Flow):
        raise ConfigurationError(
            f"{fn.name!r} is already a Prefect flow: use @leased_flow(...) in place of "
            "@flow(...), not on top of it (it takes every @flow argument)"
        )
    if not callable(fn):
        raise ConfigurationError(f"@leased_flow decorates a function, got {fn!r}")
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        raise ConfigurationError(
            f"@leased_flow does not support generator flows ({fn.__name__!r}): the lease "
            "would be held between yields while the caller runs; return a value instead"
        )


def _default_version(fn: Callable[..., Any]) -> str | None:
    """Prefect versions a flow by hashing its function's file; the function
    it sees is our wrapper, so hash the user's file instead."""
    from prefect.utilities.hashing import file_hash

    try:
        path = inspect.getsourcefile(fn)
        return file_hash(path) if path else None
    except (OSError, TypeError):
        return None


class LeasedFlow(Flow[Any, Any]):  # type: ignore[misc]
    """A Prefect ``Flow`` whose function runs under a lease. Only
    ``with_options`` differs: it re-derives the lease plan (a default key
    follows the new name) and accepts the lease options too."""

    lease_plan: LeasePlan
    _lease_fn: Callable[..., Any]
    _lease_options: dict[str, Any]

    def with_options(self, **options: Any) -> LeasedFlow:  # type: ignore[override]
        """``Flow.with_options`` plus ``key``, ``ttl``, ``store``, ``on_busy``,
        ``on_lost``, ``wait_timeout``, ``heartbeat``, ``annotate`` and
        ``supersede_if``."""
        lease_overrides = {k: options.pop(k) for k in LEASE_OPTIONS if k in options}
        unknown = sorted(set(options) - set(inspect.signature(Flow.with_options).parameters))
        if unknown:
            raise ConfigurationError(
                f"with_options got unknown argument(s) {', '.join(unknown)}; it takes "
                f"{', '.join(LEASE_OPTIONS)} and every Flow.with_options argument"
            )
        plain = Flow.with_options(self, **options)
        lease_options = {**self._lease_options, **lease_overrides}
        plan = LeasePlan(self._lease_fn, plain.name, **lease_options)
        # Flow.with_options copies every @flow setting onto a plain Flow around
        # the old wrapper (and the old plan); swap in a wrapper of the new plan.
        # It has the user function's signature (functools.wraps), so the
        # parameter schema Prefect computed from the old one stays right.
        plain.fn = _wrapper(self._lease_fn, plan)
        plain.__class__ = LeasedFlow
        leased: LeasedFlow = plain  # type: ignore[assignment]
        leased.lease_plan = plan
        leased._lease_fn = self._lease_fn
        leased._lease_options = lease_options
        return leased


#: The lease arguments of @leased_flow and LeasedFlow.with_options.
LEASE_OPTIONS = ("key", "ttl", "store", "on_busy", "on_lost", "wait_timeout", "heartbeat",
                 "annotate", "supersede_if")


def _wrapper(fn: Callable[..., Any], plan: LeasePlan) -> Callable[..., Any]:
    return _async_wrapper(fn, plan) if inspect.iscoroutinefunction(fn) else _sync_wrapper(fn, plan)


def _build(
    fn: Callable[..., Any], lease_options: dict[str, Any], flow_kwargs: dict[str, Any]
) -> LeasedFlow:
    _check_function(fn)
    unknown = sorted(set(flow_kwargs) - FLOW_ARGUMENTS)
    if unknown:
        raise ConfigurationError(
            f"@leased_flow got unknown argument(s) {', '.join(unknown)}; it takes "
            f"{', '.join(LEASE_OPTIONS)} and every @flow argument "
            f"({', '.join(sorted(FLOW_ARGUMENTS))})"
        )
    name = flow_kwargs.get("name") or fn.__name__.replace("_", "-")
    plan = LeasePlan(fn, name, **lease_options)
    if flow_kwargs.get("version") is None:
        flow_kwargs = {**flow_kwargs, "version": _default_version(fn)}
    leased = LeasedFlow(fn=_wrapper(fn, plan), **flow_kwargs)
    leased.lease_plan = plan  # for introspection and tests
    leased._lease_fn = fn
    leased._lease_options = dict(lease_options)
    return leased


@overload
def leased_flow(__fn: F) -> Flow[Any, Any]: ...


@overload
def leased_flow(
    __fn: None = None, *, key: str | None = None, ttl: float = 30.0, store: Any = None,
    on_busy: str = "skip", on_lost: str = "exit", wait_timeout: float | None = None,
    heartbeat: float | None = None, annotate: bool = True,
    supersede_if: SupersedeGuard | None = None, **flow_kwargs: Any,
) -> Callable[[F], Flow[Any, Any]]: ...


def leased_flow(
    __fn: Callable[..., Any] | None = None, *, key: str | None = None, ttl: float = 30.0,
    store: Any = None, on_busy: str = "skip", on_lost: str = "exit",
    wait_timeout: float | None = None, heartbeat: float | None = None, annotate: bool = True,
    supersede_if: SupersedeGuard | None = None, **flow_kwargs: Any,
) -> Any:
    """A Prefect flow that holds the lease ``key`` while its body runs.

    ``key`` defaults to the flow name and may name flow parameters
    (``"billing-{tenant}"``). ``store`` is a URL, ``"block:<name>"``, a
    ``LeaseStoreBlock`` or a ``LeaseStore``; by default ``$LEASE_STORE_URL``,
    else the embedded SQLite file. ``on_busy`` is ``skip`` (Cancelled),
    ``fail`` (Failed), ``wait`` (up to ``wait_timeout`` s, then Failed) or
    ``supersede`` (the holder's run is stopped and ends Cancelled, then this
    one runs; ``supersede_if(holder_meta, new_meta)`` may refuse, e.g.
    ``only_same("parameters_sha256")`` or ``only_newer("scheduled_start")``
    from ``lease_integrations.core.supersede_guards``: this run then Fails);
    ``on_lost`` is ``exit`` (report the run Crashed and end the process running
    it, with its task runs and child processes), ``check`` (nothing is stopped;
    ``current_lease().check()`` raises, and the run ends Failed) or, for async
    flows, ``cancel`` (the body is cancelled at every await; the run ends Failed).
    ``annotate`` tags the run ``lease:<key>`` and adds an artifact naming the
    key and token. Every other argument goes to ``@flow`` unchanged.
    """
    lease_options = dict(key=key, ttl=ttl, store=store, on_busy=on_busy, on_lost=on_lost,
                         wait_timeout=wait_timeout, heartbeat=heartbeat, annotate=annotate,
                         supersede_if=supersede_if)
    if __fn is None:
        return lambda fn: _build(fn, lease_options, flow_kwargs)
    return _build(__fn, lease_options, flow_kwargs)

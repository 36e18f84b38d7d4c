"""``LeasedPythonOperator``: a ``PythonOperator`` whose callable runs inside a lease.

Airflow's own limits (``max_active_runs``, pools, ``max_active_tis_per_dag``)
stop at one DAG, one metadata DB and the task's *state*; a backfill, a manual
trigger and the scheduled run of the same task can still run side by side.
The lease spans all of them, and any DAG or Airflow install that shares the
key and the store.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

from lease_integrations import ConfigurationError, Lease, LeaseBusy, LeaseLock, LeaseStore, connect
from lease_integrations.core import mask_url
from lease_integrations.core.supersede_guards import SupersedeGuard
from lease_integrations.keeper import stop_hook

from ._compat import PythonOperator
from .busy import earlier_try_wait, on_busy, remaining_wait, resumed_deadline
from .connections import DEFAULT_CONN_ID, resolve_store_url
from .meta import task_meta
from .options import DEFAULT_DEFER_SETTLE, DEFAULT_TTL, LeaseOptions, default_key
from .signals import release_on_sigterm
from .superseded import fail_superseded_try

XCOM_KEY = "lease_token"


class _NotAcquired(Exception):
    """Our own acquire found the lease busy (as opposed to a ``LeaseBusy``
    raised by the callable, which is the callable's failure to report)."""

    def __init__(self, busy: LeaseBusy) -> None:
        super().__init__(str(busy))
        self.busy = busy


def _one_ttl(lease_ttl: float | None, ttl: float | None) -> float:
    """``ttl`` is the design's name, ``lease_ttl`` the Airflow-style one (beside
    ``lease_key``); both are accepted, and saying two different things is an error."""
    if lease_ttl is not None and ttl is not None and lease_ttl != ttl:
        raise ConfigurationError(
            f"lease_ttl={lease_ttl!r} and ttl={ttl!r} disagree; pass only one of them"
        )
    chosen = ttl if ttl is not None else lease_ttl
    return DEFAULT_TTL if chosen is None else chosen


class LeasedPythonOperator(PythonOperator):  # type: ignore[misc]
    """Run ``python_callable`` only while holding the lease ``lease_key``.

    :param lease_key: the lease's name, a Jinja template over the task context
        and the callable's arguments (``"billing-{{ params.tenant }}"``, or for a
        mapped task ``"billing-{{ tenant }}"``), rendered per task instance.
        Default ``airflow/<dag_id>/<task_id>``: shared by every run of the task,
        whatever its run type, so a backfill and a manual run contend (mapped
        instances: ``.../<map_index>``, one lease per position). Share one key
        across DAGs to make them exclude each other.
    :param lease_ttl: (or ``ttl``) seconds the store keeps the lease without a renewal; it
        is renewed every ``lease_heartbeat`` (ttl/3) while the callable runs.
        After a crash (SIGKILL) the next run gets the lease after at most this.
    :param lease_conn_id: Airflow Connection of type redis, postgres, mongo or
        sqlite. If the default ``lease_default`` does not exist,
        ``$LEASE_STORE_URL`` or the embedded SQLite file under ``$AIRFLOW_HOME``.
    :param on_busy: ``skip`` (task skipped; the log names the holder), ``fail``
        (an ordinary failure, so ``retries`` apply), ``wait``, or ``supersede``:
        this run replaces the holder, which is stopped first (its try fails
        naming this run, without a retry), and takes a higher token.
    :param supersede_if: with ``supersede``: ``supersede_if(holder_meta,
        new_meta) -> bool`` may refuse (then the try fails as with ``fail``),
        say ``only_newer("logical_date")`` so a backfill never displaces
        today's run, or ``only_same("params")``
        (``lease_integrations.core.supersede_guards``). The metas carry
        dag_id, run_id, run_type, logical_date, data_interval_start/end,
        run_after (Airflow 3), params, task_id, try_number, map_index, host.
    :param wait_timeout: with ``wait``: give up (fail) after this many seconds;
        None waits as long as it takes.
    :param deferrable: with ``wait``: free the worker slot while waiting (the
        triggerer polls the store every ``poll_interval`` seconds).
    :param defer_settle: with ``deferrable``: the trigger fires no sooner than
        this many seconds after it starts, so Airflow's scheduler has recorded
        the deferring exit before the resumed try runs (see the trigger).

    A retry whose lease is still held by an earlier, dead try of the same task
    instance waits for that lease to expire (at most its remaining ttl) instead
    of skipping or failing.
    :param on_lost: ``exit`` (the default: the task process runs ``on_kill()``,
        ends every process the callable started and exits with status 75, so
        the try fails, as Airflow's own supervisor ends a task) or ``check``
        (nothing is stopped; ``lease.check()`` raises, and the try fails when
        the callable returns).

    In the callable the lease is ``context["lease"]`` (key, holder, token); the
    token is also pushed to XCom as ``lease_token`` for downstream fencing.
    """

    # ``lease_key`` is rendered by ``render_lease_key``, not with the template
    # fields: its template may name the callable's arguments too.
    template_fields: Sequence[str] = PythonOperator.template_fields

    def __init__(
        self,
        *,
        lease_key: str | None = None,
        lease_ttl: float | None = None,
        ttl: float | None = None,
        lease_heartbeat: float | None = None,
        lease_conn_id: str = DEFAULT_CONN_ID,
        on_busy: str = "skip",
        wait_timeout: float | None = None,
        on_lost: str = "exit",
        deferrable: bool = False,
        poll_interval: float = 5.0,
        defer_settle: float = DEFAULT_DEFER_SETTLE,
        supersede_if: SupersedeGuard | None = None,
        **kwargs: Any,
    ) -> None:
        # Checked before the operator exists, so a bad DAG fails to import.
        lease_ttl = _one_ttl(lease_ttl, ttl)
        self.lease_options = LeaseOptions(
            lease_key=lease_key, lease_ttl=lease_ttl, lease_heartbeat=lease_heartbeat,
            lease_conn_id=lease_conn_id, on_busy=on_busy, wait_timeout=wait_timeout,
            on_lost=on_lost, deferrable=deferrable, poll_interval=poll_interval,
            defer_settle=defer_settle, supersede_if=supersede_if,
        )
        super().__init__(**kwargs)
        self.lease_key = lease_key
        self._held: tuple[LeaseLock, Lease] | None = None
        self._deadline: str | None = None  # set when resumed after a deferred wait

    # -- Airflow entry points ---------------------------------------------------
    def execute(self, context: Any) -> Any:
        options = self.lease_options
        key = self.render_lease_key(context)
        store = connect(resolve_store_url(options.lease_conn_id))
        try:
            lock = options.lock_for(key, store, task_meta(context))
            return self._run_leased(lock, store, context)
        finally:
            store.close()

    def render_lease_key(self, context: Any) -> str:
        """The key for this task instance. ``lease_key`` is a Jinja template over
        the task context *and* the callable's arguments (``op_kwargs``, and
        ``op_args`` bound to the callable's parameters): a mapped task keyed
        ``"billing-{{ tenant }}"`` gets one lease per tenant, whatever its map
        index. An argument shadows a context variable of the same name."""
        template = self.lease_key
        if template is None:
            return default_key(self.dag_id, self.task_id, getattr(context["ti"], "map_index", -1))
        if "{{" not in template and "{%" not in template:
            return str(template)
        rendered = self.render_template(template, {**context, **self._call_arguments()})
        return str(rendered).strip()

    def _call_arguments(self) -> dict[str, Any]:
        kwargs = dict(self.op_kwargs or {})
        args = tuple(self.op_args or ())
        if not args:
            return kwargs
        try:
            bound = inspect.signature(self.python_callable).bind_partial(*args)
        except (TypeError, ValueError):
            return kwargs
        return {**bound.arguments, **kwargs}

    def execute_after_wait(self, context: Any, event: dict[str, Any] | None = None) -> Any:
        """Resumed by ``LeaseReleasedTrigger``: try again (and defer again if
        another waiter won the lease first)."""
        self._deadline = resumed_deadline(event)
        return self.execute(context)

    def on_kill(self) -> None:
        """Give the lease back, then stop the operator's own work. A lost lease
        (``on_kill`` as fail-stop's stop hook) is not the store's to give back:
        no store call, which could hang on an unreachable store for the whole
        of the ladder's budget while the process still works."""
        held = self._held
        try:
            if held is not None and not held[1].lost:
                lock, lease = held
                self.log.warning("task killed: releasing lease %s (token %s)", lease.key,
                                 lease.token)
                lock.release(lease)
        finally:
            super().on_kill()

    # -- steps --------------------------------------------------------------------
    def _run_leased(self, lock: LeaseLock, store: LeaseStore, context: Any) -> Any:
        """One immediate attempt decides the policy, so the log says who holds
        the lease before anything waits (``busy.py`` holds the rules)."""
        options = self.lease_options
        remaining = remaining_wait(options, self._deadline)
        done, outcome = self._attempt(lock, store, context, wait=0)
        if done:
            return outcome
        earlier = earlier_try_wait(outcome, task_meta(context))
        if earlier is not None:
            self.log.warning(
                "an earlier try (%s) of this task instance still holds the lease: it ended "
                "without releasing it (killed?), so this try waits up to %.1f s for it to "
                "expire: %s", outcome.meta.get("try_number"), earlier, outcome)
            done, outcome = self._attempt(lock, store, context, wait=earlier)
            if done:
                return outcome
        busy: LeaseBusy = outcome
        if options.on_busy == "supersede":
            self.log.warning("superseding the holder: %s", busy)
            done, outcome = self._attempt(lock, store, context, wait=0, supersede=True)
            if done:
                return outcome
            self.log.error("not superseded: %s", outcome)
            raise outcome from None
        remaining = on_busy(self, options, busy, remaining, self._deadline)
        done, outcome = self._attempt(lock, store, context, wait=remaining)
        if done:
            return outcome
        self.log.error("gave up waiting: %s", outcome)
        raise outcome from None

    def _attempt(self, lock: LeaseLock, store: LeaseStore, context: Any,
                 wait: float | None, supersede: bool = False) -> tuple[bool, Any]:
        """(True, the callable's result) or (False, the ``LeaseBusy`` of our
        acquire: ``SupersedeRefused`` when the guard said no)."""
        try:
            return True, self._hold_and_run(lock, store, context, wait=wait, supersede=supersede)
        except _NotAcquired as not_acquired:
            return False, not_acquired.busy

    def _hold_and_run(self, lock: LeaseLock, store: LeaseStore, context: Any,
                      wait: float | None, supersede: bool = False) -> Any:
        entered = False
        guard = self.lease_options.supersede_if if supersede else None
        try:
            with lock.hold(wait=wait, supersede=supersede, supersede_if=guard) as lease:
                entered = True
                self._held = (lock, lease)
                self.log.info("holding lease %s with token %s as %s (store %s)",
                              lease.key, lease.token, lease.holder, mask_url(store.url))
                context["lease"] = lease
                context["ti"].xcom_push(key=XCOM_KEY, value=lease.token)
                # Hooks run last-in first: on_kill stops the work, then a
                # superseded try is recorded FAILED naming the run that replaced it.
                with release_on_sigterm(lambda: lock.release(lease),
                                        f"lease {lease.key} (token {lease.token})"), \
                        stop_hook(fail_superseded_try(context, lambda: lease, store)), \
                        stop_hook(self.on_kill):
                    return super().execute(context)
        except LeaseBusy as busy:
            if entered:
                raise  # raised by the callable itself, not by our acquire
            raise _NotAcquired(busy) from None
        finally:
            self._held = None

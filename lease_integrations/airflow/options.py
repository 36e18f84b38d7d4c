"""The lease arguments of a leased task, checked when the DAG file is parsed.

A DAG with ``on_busy="wiat"`` or ``lease_ttl=0`` must fail to import (a
visible import error in the UI), not fail at 3 a.m. on its first run. Every
rule about leases (key, ttl, heartbeat, policies, waits) is the core's own
validator (one rule, one place); only the Airflow-side choices are here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from lease_integrations import ConfigurationError, LeaseLock, LeaseStore
from lease_integrations.core import (
    ON_BUSY_POLICIES,
    validate_heartbeat,
    validate_key,
    validate_on_lost,
    validate_policy,
    validate_ttl,
    validate_wait,
)

from .connections import DEFAULT_CONN_ID

#: Long enough that a busy worker's heartbeat keeps up; short enough that a
#: crashed task blocks the next run for a minute at most.
DEFAULT_TTL = 60.0

#: What a leased task may do when the lease is held: the core's policies, and
#: ``supersede`` (this run replaces the holder, which is stopped first).
AIRFLOW_ON_BUSY = (*ON_BUSY_POLICIES, "supersede")

#: A deferred waiter's trigger fires no sooner than this after it starts, so the
#: scheduler has drained the executor's "success" of the deferring exit before
#: the resumed try runs (apache/airflow#72716; see docs/airflow/operations.md).
DEFAULT_DEFER_SETTLE = 10.0

@dataclass(frozen=True)
class LeaseOptions:
    lease_key: str | None = None
    lease_ttl: float = DEFAULT_TTL
    lease_heartbeat: float | None = None
    lease_conn_id: str = DEFAULT_CONN_ID
    on_busy: str = "skip"
    wait_timeout: float | None = None
    on_lost: str = "exit"
    deferrable: bool = False
    poll_interval: float = 5.0
    defer_settle: float = DEFAULT_DEFER_SETTLE
    #: With ``on_busy="supersede"``: ``supersede_if(holder_meta, new_meta)``
    #: says whether this run may replace the holder (``only_newer``, ``only_same``).
    supersede_if: Any = None

    def __post_init__(self) -> None:
        validate_policy(self.on_busy, AIRFLOW_ON_BUSY, "on_busy")
        _check_guard(self.supersede_if, self.on_busy)
        validate_on_lost(self.on_lost, runs_async=False, subject="code, not a task's callable")
        validate_heartbeat(self.lease_heartbeat, validate_ttl(self.lease_ttl, "lease_ttl"))
        if not isinstance(self.lease_conn_id, str) or not self.lease_conn_id:
            raise ConfigurationError(
                f"lease_conn_id must be a non-empty string, got {self.lease_conn_id!r}"
            )
        if self.wait_timeout is not None and self.on_busy != "wait":
            raise ConfigurationError(
                f"wait_timeout={self.wait_timeout!r} only applies with on_busy='wait' "
                f"(on_busy is {self.on_busy!r})"
            )
        if validate_wait(self.wait_timeout) == math.inf:
            raise ConfigurationError("wait_timeout=inf: use None to wait as long as it takes")
        if not isinstance(self.deferrable, bool):
            raise ConfigurationError(f"deferrable must be True or False, got {self.deferrable!r}")
        if self.deferrable and self.on_busy != "wait":
            raise ConfigurationError(
                f"deferrable=True only applies with on_busy='wait' (on_busy is {self.on_busy!r})"
            )
        _positive("poll_interval", self.poll_interval)
        settle = self.defer_settle
        if isinstance(settle, bool) or not isinstance(settle, (int, float)) or not (
                0 <= settle < math.inf):
            raise ConfigurationError(f"defer_settle must be a number of seconds >= 0, got {settle!r}")
        # A templated key is checked once rendered (LeaseLock validates it at run time).
        key = self.lease_key
        if key is not None and not (isinstance(key, str) and ("{{" in key or "{%" in key)):
            validate_key(key)

    def lock_for(self, key: str, store: LeaseStore, meta: dict[str, object] | None = None,
                 ) -> LeaseLock:
        """The core lock these options describe (raises ConfigurationError on a bad key)."""
        return LeaseLock(store, key, ttl=self.lease_ttl, heartbeat=self.lease_heartbeat,
                         on_lost=self.on_lost, meta=meta)


def default_key(dag_id: str, task_id: str, map_index: int = -1) -> str:
    """One key per task, shared by every run of it (scheduled, manual, backfill:
    that is the overlap to prevent), never per run. Mapped instances each get
    their own *per map index*, since they run side by side by design: index 3 of
    one run excludes index 3 of another whatever their inputs, which is right
    only when the mapped list is stable. Key on the mapped argument
    (``lease_key="billing-{{ tenant }}"``) when it is the input that matters."""
    key = f"airflow/{dag_id}/{task_id}"
    return key if map_index is None or map_index < 0 else f"{key}/{map_index}"


def _check_guard(guard: object, policy: str) -> None:
    """``supersede_if`` is a callable, and only given with ``on_busy="supersede"``:
    a guard left unused would read as a promise that a backfill cannot
    displace today's run."""
    if guard is None:
        return
    if not callable(guard):
        raise ConfigurationError(
            f"supersede_if must be a callable (holder_meta, new_meta) -> bool such as "
            f"only_newer('logical_date'), got {guard!r}")
    if policy != "supersede":
        raise ConfigurationError(
            f"supersede_if only applies with on_busy='supersede' (on_busy is {policy!r})")


def _positive(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigurationError(f"{name} must be a number of seconds, got {value!r}")
    if value <= 0:
        raise ConfigurationError(f"{name} must be a positive number of seconds, got {value!r}")
    return float(value)

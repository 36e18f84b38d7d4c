"""What a task does when the lease it needs is busy: skip, fail, wait, or wait
deferred in the triggerer.

Both faces that take a lease in a task (``LeasedPythonOperator`` and the
DAG-run lease's acquire task) answer a busy lease the same way, so the rules
live here once: the first refusal decides the policy (the log names the
holder before anything waits), a deferred wait resumes in
``execute_after_wait`` with the same overall deadline, and a blocking wait
returns the seconds it may still take.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

from lease_integrations import LeaseBusy

from ._compat import AirflowSkipException
from .options import LeaseOptions
from .trigger import LeaseReleasedTrigger

#: The method a deferred wait resumes in; both faces define it.
RESUME_METHOD = "execute_after_wait"

#: Added to an earlier try's remaining ttl: the store judged expiry on its own
#: clock a moment ago; this covers that read and one polling step.
EXPIRY_MARGIN = 1.0

#: The meta fields that name one task instance (the try number aside).
TASK_INSTANCE_FIELDS = ("dag_id", "task_id", "run_id", "map_index")


def earlier_try_wait(busy: LeaseBusy, meta: Mapping[str, Any]) -> float | None:
    """Seconds to wait if the holder is an earlier try of the task instance
    ``meta`` describes (same dag_id, task_id, run_id, map_index; smaller
    try_number): a try that was SIGKILLed or OOM-killed and left its lease to
    expire. That holder is this run's own past, not another run to exclude, so
    the retry waits out its remaining ttl instead of skipping (which would skip
    everything downstream) or failing. None for any other holder."""
    held = busy.meta
    if not all(held.get(f) == meta.get(f) for f in TASK_INSTANCE_FIELDS):
        return None
    theirs, mine = held.get("try_number"), meta.get("try_number")
    if not (isinstance(theirs, int) and isinstance(mine, int) and theirs < mine):
        return None
    left = busy.record.expires_in if busy.record is not None else None
    return max(0.0, left or 0.0) + EXPIRY_MARGIN


def remaining_wait(options: LeaseOptions, deadline: str | None) -> float | None:
    """Seconds the task may still wait (None: as long as it takes). ``deadline``
    is the one a deferred wait carried back, so repeated deferrals share one
    ``wait_timeout`` instead of restarting it."""
    if deadline is None:
        return options.wait_timeout
    left = (datetime.fromisoformat(deadline) - datetime.now(timezone.utc)).total_seconds()
    return max(0.0, left)


def on_busy(task: Any, options: LeaseOptions, busy: LeaseBusy, remaining: float | None,
            deadline: str | None, what: str = "") -> float | None:
    """Apply ``options.on_busy`` to the first refusal. Raises for ``skip`` and
    ``fail``, defers (never returns) for a deferrable wait, and otherwise
    returns how long the caller may block waiting (None: forever).

    ``task`` is the operator (for its log and ``defer``); ``what`` names the
    work that is skipped or failed in the log ("the whole run", say)."""
    scope = f" {what}" if what else ""
    if options.on_busy == "skip":
        task.log.info("skipping%s: %s", scope, busy)
        raise AirflowSkipException(f"skipped: {busy}")
    if options.on_busy == "fail":
        task.log.error("failing%s: %s", scope, busy)
        raise busy
    if options.deferrable and (remaining is None or remaining > 0):
        task.log.info("deferring until it is free: %s", busy)
        if deadline is None and remaining is not None:
            deadline = (datetime.now(timezone.utc) + timedelta(seconds=remaining)).isoformat()
        task.defer(
            trigger=LeaseReleasedTrigger(lease_key=busy.key, lease_conn_id=options.lease_conn_id,
                                         poll_interval=options.poll_interval, deadline=deadline,
                                         settle=options.defer_settle),
            method_name=RESUME_METHOD,
            timeout=None if remaining is None else timedelta(seconds=remaining),
        )
    task.log.info("waiting %s for it: %s",
                  "as long as it takes" if remaining is None else f"up to {remaining:.1f} s", busy)
    return remaining


def resumed_deadline(event: dict[str, Any] | None) -> str | None:
    """The overall deadline a deferred wait's event carries back."""
    value = (event or {}).get("deadline")
    return None if value is None else str(value)

"""What an Airflow lease holder does when its lease is busy: one decision,
kept apart from the operator so every Airflow face (the task lease, the DAG-run
lease) decides the same way and the rules are readable in one place.

The decision is pure (a busy record and the options in, an action out); the
caller carries it out (raise a skip, raise ``LeaseBusy``, wait in the worker,
or defer to the triggerer).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lease_integrations import LeaseBusy

#: Added to an earlier try's remaining ttl: the store judges expiry on its own
#: clock, read a moment ago; this covers the read and one polling step.
EXPIRY_MARGIN = 1.0

SKIP, FAIL, WAIT, DEFER, EARLIER_TRY = "skip", "fail", "wait", "defer", "earlier_try"

#: The meta fields that name one task instance (the try number aside).
TASK_INSTANCE_FIELDS = ("dag_id", "task_id", "run_id", "map_index")


@dataclass(frozen=True)
class BusyAction:
    """``kind`` is one of skip, fail, wait, defer, earlier_try; ``wait`` is the
    seconds to wait for wait/earlier_try/defer (None: as long as it takes)."""

    kind: str
    wait: float | None = None


def earlier_try_of_this_instance(busy: LeaseBusy, meta: Mapping[str, Any]) -> int | None:
    """The try number of the holder if it is an earlier try of the task
    instance ``meta`` describes (a try that crashed, was SIGKILLed or OOM-killed
    and left its lease to expire), else None. Such a holder is not another run
    to exclude: it is this run's own past, and the retry must wait it out
    rather than skip (which would skip everything downstream) or fail."""
    held = busy.meta
    if not all(held.get(f) == meta.get(f) for f in TASK_INSTANCE_FIELDS):
        return None
    theirs, mine = held.get("try_number"), meta.get("try_number")
    if isinstance(theirs, int) and isinstance(mine, int) and theirs < mine:
        return theirs
    return None


def decide(busy: LeaseBusy, *, on_busy: str, deferrable: bool, remaining: float | None,
           meta: Mapping[str, Any], waited_for_earlier_try: bool = False) -> BusyAction:
    """The action for a busy lease.

    ``remaining`` is what is left of ``wait_timeout`` (None: no limit);
    ``waited_for_earlier_try`` is True once the caller has already waited out
    an earlier try, so a lease that stays busy after that follows ``on_busy``.
    """
    if not waited_for_earlier_try and earlier_try_of_this_instance(busy, meta) is not None:
        left = busy.record.expires_in if busy.record is not None else None
        return BusyAction(EARLIER_TRY, max(0.0, left or 0.0) + EXPIRY_MARGIN)
    if on_busy == SKIP:
        return BusyAction(SKIP)
    if on_busy == FAIL:
        return BusyAction(FAIL)
    if deferrable and (remaining is None or remaining > 0):
        return BusyAction(DEFER, remaining)
    return BusyAction(WAIT, remaining)

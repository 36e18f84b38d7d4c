"""What a flow run tells a superseding run about itself, in its lease meta:
its parameters (``parameters``, when small), their digest
(``parameters_sha256``) and when it was meant to start (``scheduled_start``).

A ``supersede_if`` guard reads these in the holder's meta and the new run's:
``only_same("parameters_sha256")`` replaces only a run of the same
parameters, ``only_newer("scheduled_start")`` only an earlier-scheduled one,
so a backfill or a manual run of other parameters cannot displace today's
scheduled run. The digest is always there: parameters too large for meta
(which every history event copies) are compared by it alone.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Callable
from typing import Any

#: Parameters larger than this (compact JSON) are kept as their digest only.
PARAMETERS_MAX_BYTES = 1024
#: ... and so are parameters nested deeper than this (meta has a depth limit).
PARAMETERS_MAX_DEPTH = 8


def run_fields(fn: Callable[..., Any], args: tuple[Any, ...],
               kwargs: dict[str, Any]) -> dict[str, Any]:
    """The fields above for the run in context (its parameters as the
    Prefect API has them), or, outside a run, for the call ``fn(*args,
    **kwargs)``."""
    from prefect.context import FlowRunContext

    ctx = FlowRunContext.get()
    run = ctx.flow_run if ctx is not None else None
    # With the function's defaults filled in: a deployment's run carries only
    # the parameters it was given, a direct call all of them; one digest for both.
    parameters = _bound(fn, (), dict(run.parameters)) \
        if run is not None and run.parameters is not None else _bound(fn, args, kwargs)
    text = json.dumps(parameters, sort_keys=True, separators=(",", ":"), default=str)
    fields: dict[str, Any] = {"parameters_sha256": hashlib.sha256(text.encode()).hexdigest()}
    plain = _plain(text)
    if plain is not None:
        fields["parameters"] = plain
    start = getattr(run, "expected_start_time", None) if run is not None else None
    if start is not None:
        fields["scheduled_start"] = start.isoformat()
    return fields


def _bound(fn: Callable[..., Any], args: tuple[Any, ...],
           kwargs: dict[str, Any]) -> dict[str, Any]:
    try:
        bound = inspect.signature(fn).bind_partial(*args, **kwargs)
    except (TypeError, ValueError):
        return dict(kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def _plain(text: str) -> dict[str, Any] | None:
    """The parameters as meta may keep them (small, UTF-8, no NUL, finite
    numbers, not too deep: ``validate_meta``'s rules), else None: the digest alone."""
    if len(text) > PARAMETERS_MAX_BYTES or "\\u0000" in text:
        return None
    value = json.loads(text)
    try:
        json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except (UnicodeEncodeError, ValueError):  # a lone surrogate, a NaN
        return None
    return value if isinstance(value, dict) and _depth(value) <= PARAMETERS_MAX_DEPTH else None


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0

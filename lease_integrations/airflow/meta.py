"""What a lease's holder meta says about an Airflow holder, so a person
running ``leasectl list`` sees which DAG run (and task try) holds it, and a
``supersede_if`` guard can compare the holder's run with the new one: the
logical date and data interval (``only_newer("logical_date")`` keeps a
backfill from displacing today's run), Airflow 3's ``run_after``, and the
run's params (``only_same("params")``)."""

from __future__ import annotations

import hashlib
import json
import re
import socket
from collections.abc import Mapping
from datetime import datetime
from typing import Any

#: Params larger than this as JSON are recorded as a digest (``params_sha256``):
#: the whole meta is copied into every history event and has a size limit.
PARAMS_MAX_BYTES = 1024

#: What no store keeps alike in meta (NUL; a surrogate, perhaps a lone one),
#: as ``json.dumps`` escapes it: such params are recorded as their digest.
UNSTORABLE = re.compile(r"\\u(0000|d[89a-f][0-9a-f]{2})", re.IGNORECASE)

#: The run's times a guard may compare (ISO 8601 text, None when the run has none).
RUN_TIMES = ("logical_date", "data_interval_start", "data_interval_end")


def run_meta(context: Mapping[str, Any]) -> dict[str, Any]:
    """The DAG run: dag_id, run_id, run_type, the worker's host, and what a
    supersede guard compares (its times and params)."""
    ti = context["ti"]
    dag_run = context.get("dag_run")
    run_type = getattr(dag_run, "run_type", None)
    # "host" is the name the core records for every holder (a supersede knows
    # a holder on its own host by it, and waits for its pid); Airflow's own
    # name for the worker (often the FQDN) is added when it differs.
    host = socket.gethostname()
    meta: dict[str, Any] = {
        "dag_id": ti.dag_id,
        "run_id": ti.run_id,
        "run_type": getattr(run_type, "value", run_type),
        "host": host,
    }
    worker = getattr(ti, "hostname", None)
    if worker and worker != host:
        meta["worker"] = worker
    for name in RUN_TIMES:
        meta[name] = _iso(context.get(name, getattr(dag_run, name, None)))
    run_after = getattr(dag_run, "run_after", None)  # Airflow 3
    if run_after is not None:
        meta["run_after"] = _iso(run_after)
    meta.update(_params(context.get("params")))
    return meta


def task_meta(context: Mapping[str, Any]) -> dict[str, Any]:
    """The task try within the run, for a task-level lease."""
    ti = context["ti"]
    return {**run_meta(context), "task_id": ti.task_id, "try_number": ti.try_number,
            "map_index": ti.map_index}


def _iso(value: object) -> str | None:
    if isinstance(value, datetime):
        return value.isoformat()
    return None if value is None else str(value)


def _params(params: object) -> dict[str, Any]:
    """The run's params as plain JSON (``{"params": ...}``), or their digest
    when large; nothing when the run has none."""
    if params is None:
        return {}
    dump = getattr(params, "dump", None)
    plain = dump() if callable(dump) else params
    try:
        text = json.dumps(plain, sort_keys=True, default=str, allow_nan=False)
    except (TypeError, ValueError):
        return {}
    if len(text.encode()) > PARAMS_MAX_BYTES or UNSTORABLE.search(text):
        return {"params_sha256": hashlib.sha256(text.encode()).hexdigest()}
    value: Any = json.loads(text)
    return {"params": value}

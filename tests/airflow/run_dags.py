"""Run DAGs from the test DAG folder with ``dag.test()`` in this process, one
after another, and print one ``RESULT {json}`` line per run.

Usage: run_dags.py SPEC ...  where SPEC is DAG_ID[@LOGICAL_DATE], or
``gate:NAME`` to wait until the test creates $LEASE_TEST_RECORD_DIR/NAME, or
``env:NAME=VALUE`` to set an environment variable for the runs after it
(Airflow reads ``AIRFLOW__*`` settings at each lookup; an empty VALUE unsets).
A process can thus pay Airflow's start-up (a first run of ``lt_warm``) while
another process is still starting, and run its leased DAGs on the test's cue.
"""

from __future__ import annotations

import inspect
import json
import os
import runpy
import sys
import time
from datetime import datetime
from pathlib import Path

GATE_TIMEOUT = 180.0


def main(specs: list[str]) -> None:
    dags = runpy.run_path(os.path.join(os.environ["AIRFLOW__CORE__DAGS_FOLDER"],
                                       "lease_test_dags.py"))
    for spec in specs:
        if spec.startswith("gate:"):
            wait_for_gate(spec[len("gate:"):])
            continue
        if spec.startswith("env:"):
            name, _, value = spec[len("env:"):].partition("=")
            if value:
                os.environ[name] = value
            else:
                os.environ.pop(name, None)
            continue
        dag_id, _, date = spec.partition("@")
        dag = next(d for d in dags.values() if getattr(d, "dag_id", None) == dag_id
                   and hasattr(d, "test"))
        logical_date = datetime.fromisoformat(date) if date else None
        # Airflow 2 calls the logical date execution_date.
        name = "logical_date" if "logical_date" in inspect.signature(dag.test).parameters \
            else "execution_date"
        dr = dag.test(**{name: logical_date}) if logical_date else dag.test()
        states = {ti.task_id: str(getattr(ti.state, "value", ti.state))
                  for ti in dr.get_task_instances()}
        print("RESULT " + json.dumps({"dag_id": dag_id, "run_id": dr.run_id,
                                      "state": str(getattr(dr.state, "value", dr.state)),
                                      "tasks": states}), flush=True)


def wait_for_gate(name: str) -> None:
    gate = Path(os.environ["LEASE_TEST_RECORD_DIR"]) / name
    deadline = time.monotonic() + GATE_TIMEOUT
    while not gate.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"gate {gate} never opened")
        time.sleep(0.05)
    print(f"GATE {name} opened", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])

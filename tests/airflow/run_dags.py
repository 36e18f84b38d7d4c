"""Run DAGs from the test DAG folder with ``dag.test()`` in this process, one
after another, and print one ``RESULT {json}`` line per run.

Usage: run_dags.py DAG_ID[@LOGICAL_DATE] ...
"""

from __future__ import annotations

import json
import os
import runpy
import sys
from datetime import datetime


def main(specs: list[str]) -> None:
    dags = runpy.run_path(os.path.join(os.environ["AIRFLOW__CORE__DAGS_FOLDER"],
                                       "lease_test_dags.py"))
    for spec in specs:
        dag_id, _, date = spec.partition("@")
        dag = next(d for d in dags.values() if getattr(d, "dag_id", None) == dag_id
                   and hasattr(d, "test"))
        logical_date = datetime.fromisoformat(date) if date else None
        dr = dag.test(logical_date=logical_date) if logical_date else dag.test()
        states = {ti.task_id: str(getattr(ti.state, "value", ti.state))
                  for ti in dr.get_task_instances()}
        print("RESULT " + json.dumps({"dag_id": dag_id, "run_id": dr.run_id,
                                      "state": str(getattr(dr.state, "value", dr.state)),
                                      "tasks": states}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])

"""A lost lease fails the task even when the callable catches ``Exception``
(issue 12): the operator and ``@task.leased`` through ``dag.test()``. Under
fail-stop (``on_lost="exit"``, the default) nothing is raised into the
callable for it to swallow: the process running the task ends with status 75,
so each DAG runs in a process of its own (the two start side by side)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from harness import events, wait_until

from lease_integrations import LEASE_LOST_EXIT_STATUS, connect


def test_except_exception_in_the_callable_cannot_swallow_the_loss(run_dags: Any,
                                                                  record_dir: Path) -> None:
    store = connect(os.environ["LEASE_STORE_URL"])
    procs = {dag_id: run_dags(dag_id, name=dag_id)
             for dag_id in ("lt_swallow", "lt_swallow_decorated")}
    for dag_id in procs:
        wait_until(lambda dag_id=dag_id: [e for e in events(record_dir)
                                          if e["event"] == "start" and e["dag_id"] == dag_id],
                   f"{dag_id} to start")
        before = store.force_release(f"airflow/{dag_id}/job", by="test operator")
        assert before is not None and before.held

    for dag_id, proc in procs.items():
        assert proc.wait() == [], f"{dag_id} recorded an outcome: {proc.tail()}"
        assert proc.process.returncode == LEASE_LOST_EXIT_STATUS, proc.tail()
        assert re.search(rf"lease airflow/{dag_id}/job \(token \d+\) lost", proc.output())
    assert not [e for e in events(record_dir) if e["event"] in ("swallowed", "survived")]
    store.close()

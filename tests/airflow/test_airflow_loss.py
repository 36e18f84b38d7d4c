"""A lost lease fails the task even when the callable catches ``Exception``
(issue 12): the operator and ``@task.leased`` through ``dag.test()``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from harness import events, result_for, wait_until

from lease_integrations import connect


def test_except_exception_in_the_callable_cannot_swallow_the_loss(run_dags: Any,
                                                                  record_dir: Path) -> None:
    store = connect(os.environ["LEASE_STORE_URL"])
    proc = run_dags("lt_swallow", "lt_swallow_decorated", name="swallow")
    for dag_id, task_id in (("lt_swallow", "job"), ("lt_swallow_decorated", "job")):
        wait_until(lambda dag_id=dag_id: [e for e in events(record_dir)
                                          if e["event"] == "start" and e["dag_id"] == dag_id],
                   f"{dag_id} to start")
        before = store.force_release(f"airflow/{dag_id}/{task_id}", by="test operator")
        assert before is not None and before.held

    results = proc.wait()
    for dag_id in ("lt_swallow", "lt_swallow_decorated"):
        assert result_for(results, dag_id)["tasks"]["job"] == "failed"
    assert not [e for e in events(record_dir) if e["event"] in ("swallowed", "survived")]
    assert "lease 'airflow/lt_swallow/job' (token 1) was lost" in proc.output()
    store.close()

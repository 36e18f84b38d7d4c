"""Parse time for ``supersede``: a bad ``supersede_if`` (not callable, or
given without ``on_busy="supersede"``) fails the DAG file with an error
naming the argument, an import error in the UI, before any run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from harness import dag_bag_class

try:  # Airflow 3
    from airflow.sdk import DAG, task
except ImportError:  # Airflow 2.11
    from airflow import DAG
    from airflow.decorators import task

from lease_integrations import ConfigurationError
from lease_integrations.airflow import LeasedPythonOperator
from lease_integrations.core.supersede_guards import only_newer, only_same

BAD = [
    ({"on_busy": "supersede", "supersede_if": "logical_date"}, "supersede_if must be a callable"),
    ({"on_busy": "supersede", "supersede_if": 3}, "supersede_if must be a callable"),
    ({"on_busy": "skip", "supersede_if": only_newer()}, "only applies with on_busy='supersede'"),
    ({"supersede_if": only_same("params")}, "only applies with on_busy='supersede'"),
    ({"on_busy": "supersede", "deferrable": True}, "deferrable"),
    ({"on_busy": "supersede", "wait_timeout": 5}, "wait_timeout"),
]


def noop() -> None:
    pass


@pytest.mark.parametrize(("kwargs", "named"), BAD)
def test_a_bad_supersede_fails_the_operator_and_the_decorator(kwargs: dict[str, Any],
                                                              named: str) -> None:
    with DAG("bad_supersede", schedule=None), pytest.raises(ConfigurationError) as info:
        LeasedPythonOperator(task_id="t", python_callable=noop, **kwargs)
    assert named in str(info.value)
    with DAG("bad_supersede_decorated", schedule=None), \
            pytest.raises(ConfigurationError) as info:
        task.leased(**kwargs)(noop)()
    assert named in str(info.value)


def test_supersede_with_a_guard_is_accepted() -> None:
    with DAG("good_supersede", schedule=None):
        op = LeasedPythonOperator(task_id="t", python_callable=noop, on_busy="supersede",
                                  supersede_if=only_newer("logical_date"))
        bare = LeasedPythonOperator(task_id="u", python_callable=noop, on_busy="supersede")
    assert op.lease_options.on_busy == "supersede"
    assert op.lease_options.supersede_if is not None and bare.lease_options.supersede_if is None


BAD_DAG = '''
from datetime import datetime, timezone
try:
    from airflow.sdk import DAG
except ImportError:
    from airflow import DAG
from lease_integrations.airflow import LeasedPythonOperator

with DAG("bad_guard_file", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc)):
    LeasedPythonOperator(task_id="t", python_callable=print, on_busy="supersede",
                         supersede_if="only_newer")
'''


def test_a_dag_file_with_a_bad_supersede_if_fails_to_import(airflow_home: Path,
                                                            tmp_path: Path) -> None:
    path = tmp_path / "bad_guard.py"
    path.write_text(BAD_DAG)
    bag = dag_bag_class()(dag_folder=str(path))
    assert "bad_guard_file" not in bag.dag_ids
    errors = "\n".join(bag.import_errors.values())
    assert "supersede_if must be a callable" in errors, bag.import_errors


@pytest.mark.parametrize(("kwargs", "named"), BAD[:4])
def test_a_bad_supersede_fails_the_dag_run_lease(kwargs: dict[str, Any], named: str) -> None:
    from datetime import datetime, timezone

    from lease_integrations.airflow.dag_run_lease import dag_run_lease

    with DAG("bad_run_supersede", schedule=None,
             start_date=datetime(2026, 1, 1, tzinfo=timezone.utc)), \
            pytest.raises(ConfigurationError) as info, dag_run_lease(**kwargs):
        LeasedPythonOperator(task_id="t", python_callable=noop)
    assert named in str(info.value)


def test_params_reach_the_meta_plainly_or_as_a_digest() -> None:
    """A guard reads params from the meta; what no store keeps alike (NUL, a
    lone surrogate) or what is too large goes in as a digest, never fails the run."""
    from datetime import date

    from lease_integrations.airflow.meta import _params

    assert _params({"region": "eu", "day": date(2026, 1, 1)}) == {
        "params": {"day": "2026-01-01", "region": "eu"}}
    assert _params(None) == {}
    for unstorable in ({"a": "x\x00y"}, {"a": "\udc80"}, {"a": "x" * 2000}):
        assert set(_params(unstorable)) == {"params_sha256"}, unstorable

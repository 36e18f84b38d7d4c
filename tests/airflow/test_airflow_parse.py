"""Parse time: bad lease arguments fail the DAG file (an import error in the
UI) before any run; the decorator is registered through the provider entry
point; the example DAGs import cleanly."""

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
from lease_integrations.airflow.decorator import leased_task

EXAMPLES = Path(__file__).resolve().parents[2] / "example_dags"


def noop() -> None:
    pass


@pytest.mark.parametrize(("kwargs", "named"), [
    ({"on_busy": "wiat"}, "'wiat'"),
    ({"on_lost": "ignore"}, "'ignore'"),
    ({"on_lost": "interrupt"}, "replaced by 'exit'"),
    ({"on_lost": "cancel"}, "'exit' or 'check'"),
    ({"lease_ttl": 0}, "ttl"),
    ({"lease_ttl": "60"}, "'60'"),
    ({"lease_key": "has spaces"}, "'has spaces'"),
    ({"lease_key": ""}, "empty"),
    ({"lease_conn_id": ""}, "lease_conn_id"),
    ({"lease_ttl": 6, "lease_heartbeat": 3}, "heartbeat=3"),
    ({"on_busy": "skip", "wait_timeout": 10}, "wait_timeout=10"),
    ({"on_busy": "wait", "wait_timeout": -1}, "-1"),
    ({"on_busy": "fail", "deferrable": True}, "deferrable"),
    ({"on_busy": "wait", "deferrable": True, "poll_interval": 0}, "poll_interval"),
    ({"ttl": 30, "lease_ttl": 60}, "disagree"),
    ({"ttl": -5}, "ttl"),
])
def test_bad_arguments_fail_when_the_dag_is_parsed(kwargs: dict[str, Any], named: str) -> None:
    with DAG("bad_args", schedule=None), pytest.raises(ConfigurationError) as info:
        LeasedPythonOperator(task_id="t", python_callable=noop, **kwargs)
    assert named in str(info.value)


def test_ttl_is_accepted_under_the_design_s_name_too() -> None:
    with DAG("ttl_alias", schedule=None):
        by_design = LeasedPythonOperator(task_id="a", python_callable=noop, ttl=30)
        airflow_style = LeasedPythonOperator(task_id="b", python_callable=noop, lease_ttl=45)
        default = LeasedPythonOperator(task_id="c", python_callable=noop)
    assert by_design.lease_options.lease_ttl == 30
    assert airflow_style.lease_options.lease_ttl == 45
    assert default.lease_options.lease_ttl == 60


def test_templated_key_is_checked_once_rendered_not_at_parse_time() -> None:
    with DAG("templated", schedule=None):
        op = LeasedPythonOperator(task_id="t", python_callable=noop,
                                  lease_key="tenant-{{ params.tenant }}")
    # Rendered by the operator at run time (with the callable's arguments as
    # well as the context), not by Airflow's template fields, whose strict
    # rendering does not know the arguments.
    assert "lease_key" not in op.template_fields
    assert op.lease_key == "tenant-{{ params.tenant }}"


def test_task_leased_is_registered_through_the_provider_entry_point() -> None:
    assert task.leased is leased_task
    with DAG("decorated", schedule=None) as dag:
        @task.leased(lease_key="k", lease_ttl=5, on_busy="wait", wait_timeout=3)
        def work() -> None:
            pass

        work()
    op = dag.get_task("work")
    assert isinstance(op, LeasedPythonOperator)
    assert op.lease_options.on_busy == "wait" and op.lease_key == "k"
    with DAG("decorated_bad", schedule=None), pytest.raises(ConfigurationError, match="'never'"):
        task.leased(on_busy="never")(noop)()


def test_example_dags_import_cleanly(airflow_home: Path) -> None:
    DagBag = dag_bag_class()

    expected = {"nightly_billing.py": {"nightly_billing"},
                "fenced_ledger.py": {"fenced_ledger"},
                "fenced_export.py": {"fenced_export"},
                "shared_warehouse_key.py": {"warehouse_hourly_load", "warehouse_weekly_rebuild"}}
    for name, dag_ids in expected.items():
        bag = DagBag(dag_folder=str(EXAMPLES / name))
        assert bag.import_errors == {}, name
        assert set(bag.dag_ids) == dag_ids

"""DAGs the Airflow tests run (through ``dag.test()`` and the real scheduler).

Callables record what they did as JSON lines in ``$LEASE_TEST_RECORD_DIR``
and wait on gate files the test creates, so a test controls exactly when a
holder lets go, without sleeping.
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

try:  # Airflow 3
    from airflow.providers.standard.operators.python import PythonOperator
    from airflow.sdk import DAG, task
except ImportError:  # Airflow 2.11
    from airflow import DAG
    from airflow.decorators import task
    from airflow.operators.python import PythonOperator

from lease_integrations.airflow import LeasedPythonOperator

RECORD_DIR = os.environ.get("LEASE_TEST_RECORD_DIR", "/nonexistent")
GATE_TIMEOUT = 120.0
START = datetime(2026, 1, 1, tzinfo=timezone.utc)
SHARED_KEY = "airflow/lt_hold/job"


def record(event: str, context: dict[str, Any], **extra: Any) -> None:
    ti = context["ti"]
    lease = context.get("lease")
    line = {
        "event": event, "dag_id": ti.dag_id, "task_id": ti.task_id, "run_id": ti.run_id,
        "try_number": ti.try_number, "pid": os.getpid(), "t": time.monotonic(),
        "token": getattr(lease, "token", None), "key": getattr(lease, "key", None),
        "holder": getattr(lease, "holder", None), "meta": getattr(lease, "meta", None), **extra,
    }
    with open(Path(RECORD_DIR) / "events.jsonl", "a") as f:
        f.write(json.dumps(line, default=str) + "\n")


def wait_for_gate(name: str) -> None:
    gate = Path(RECORD_DIR) / name
    deadline = time.monotonic() + GATE_TIMEOUT
    while not gate.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gate {gate} never opened")
        time.sleep(0.05)


def work(gate: str | None = None, hold: float = 0.0, **context: Any) -> int:
    record("start", context)
    if gate:
        wait_for_gate(gate)
    if hold:
        time.sleep(hold)  # the work itself (e2e test): not a synchronisation
    record("end", context)
    return int(context["lease"].token)


def sleep_until_lost(**context: Any) -> None:
    record("start", context)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(0.1)  # the process is ended (on_lost="exit") when the lease is broken
    record("survived", context)


def check_until_lost(**context: Any) -> None:
    record("start", context)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        context["lease"].check()
        time.sleep(0.05)
    record("survived", context)


def swallow_until_lost(**context: Any) -> None:
    """Job code that handles errors per item: ``except Exception`` must not
    keep it working once the lease is lost (fail-stop ends the process)."""
    record("start", context)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            time.sleep(0.1)
        except Exception as exc:
            record("swallowed", context, error=repr(exc))
    record("survived", context)


def fail(**context: Any) -> None:
    record("start", context)
    raise ValueError("the callable failed on purpose")


def leased(dag: DAG, task_id: str = "job", **kwargs: Any) -> LeasedPythonOperator:
    kwargs.setdefault("python_callable", work)
    return LeasedPythonOperator(task_id=task_id, dag=dag, **kwargs)


def make_dag(dag_id: str, **kwargs: Any) -> DAG:
    kwargs.setdefault("schedule", None)
    return DAG(dag_id, start_date=START, catchup=False, **kwargs)


# -- no lease: pays Airflow's one-time start-up in a process before its real work ----
lt_warm = make_dag("lt_warm")
PythonOperator(task_id="warm", python_callable=lambda: None, dag=lt_warm)

# -- basic behaviour: context, XCom, meta, the decorator --------------------------
with make_dag("lt_basic") as lt_basic:
    first = leased(lt_basic, "first", lease_ttl=5)

    @task.leased(lease_key="basic-{{ dag.dag_id }}-templated", lease_ttl=5)
    def second(lease: Any = None, ti: Any = None, **context: Any) -> int:
        record("start", {**context, "ti": ti, "lease": lease},
               upstream_token=ti.xcom_pull(task_ids="first", key="lease_token"))
        return int(lease.token)

    first >> second()

lt_fail = make_dag("lt_fail")
leased(lt_fail, python_callable=fail, lease_ttl=5)

# -- connections: one task per store type, and a connection id that does not exist ----
lt_conn = make_dag("lt_conn")
for conn_id in ("lease_default", "lease_sqlite", "lease_redis", "lease_pg"):
    leased(lt_conn, conn_id, lease_conn_id=conn_id, lease_ttl=5)

lt_conn_missing = make_dag("lt_conn_missing")
leased(lt_conn_missing, lease_conn_id="lease_nope", lease_ttl=5)

# -- overlap: one key, every policy --------------------------------------------------
lt_hold = make_dag("lt_hold")
leased(lt_hold, op_kwargs={"gate": "go1"}, on_busy="skip", lease_ttl=5)

lt_busy_fail = make_dag("lt_busy_fail")
leased(lt_busy_fail, lease_key=SHARED_KEY, on_busy="fail", lease_ttl=5)

lt_wait = make_dag("lt_wait")
leased(lt_wait, lease_key=SHARED_KEY, on_busy="wait", wait_timeout=120, lease_ttl=5,
       op_kwargs={"gate": "go2"})

lt_defer = make_dag("lt_defer")
leased(lt_defer, lease_key=SHARED_KEY, on_busy="wait", wait_timeout=120, deferrable=True,
       poll_interval=0.5, lease_ttl=5)

# -- loss, SIGTERM and crash -------------------------------------------------------
lt_loss = make_dag("lt_loss")
leased(lt_loss, python_callable=sleep_until_lost, lease_ttl=3)

lt_loss_check = make_dag("lt_loss_check")
leased(lt_loss_check, python_callable=check_until_lost, lease_ttl=3, on_lost="check")

lt_swallow = make_dag("lt_swallow")
leased(lt_swallow, python_callable=swallow_until_lost, lease_ttl=3)

with make_dag("lt_swallow_decorated") as lt_swallow_decorated:
    @task.leased(lease_ttl=3)
    def job(ti: Any = None, **context: Any) -> None:
        swallow_until_lost(ti=ti, **context)

    job()

lt_sigterm = make_dag("lt_sigterm")
leased(lt_sigterm, op_kwargs={"gate": "never"}, lease_ttl=60)

lt_crash = make_dag("lt_crash")
leased(lt_crash, op_kwargs={"gate": "crash-go"}, lease_ttl=3)

# -- the real scheduler: a backfill and manual runs of one DAG -----------------------
with DAG("lt_e2e", start_date=START, schedule=timedelta(days=1), catchup=False,
         max_active_runs=5) as lt_e2e:
    # Retries only cover Airflow's own start-up hiccups on a loaded machine (an
    # api-server timeout before the task runs); a try that ran the callable is
    # recorded, so the test still sees every execution.
    leased(lt_e2e, on_busy="wait", wait_timeout=300, lease_ttl=10, op_kwargs={"hold": 1.0},
           retries=2, retry_delay=timedelta(seconds=1))

# Killed from the UI/API while it runs: the supervisor sends SIGTERM.
lt_e2e_kill = make_dag("lt_e2e_kill")
leased(lt_e2e_kill, op_kwargs={"gate": "never"}, lease_ttl=60)

# Waits for lt_e2e_kill's lease in the real triggerer, holding no worker slot.
lt_e2e_defer = make_dag("lt_e2e_defer")
leased(lt_e2e_defer, lease_key="airflow/lt_e2e_kill/job", on_busy="wait", deferrable=True,
       poll_interval=0.5, wait_timeout=240, lease_ttl=10)

# -- operations: the per-host default refused, mapped tasks keyed on their argument --
lt_refuse = make_dag("lt_refuse")
leased(lt_refuse, lease_ttl=5)

TENANTS = ["t1", "t2", "t3"]


def _mapped_dag(dag_id: str, tenants: list[str]) -> DAG:
    with make_dag(dag_id) as dag:
        @task.leased(lease_key="tenant-{{ tenant }}", on_busy="wait", wait_timeout=120,
                     lease_ttl=5)
        def bill(tenant: str, lease: Any = None, ti: Any = None, **context: Any) -> int:
            record("start", {"ti": ti, "lease": lease}, tenant=tenant)
            time.sleep(0.5)  # the work itself: long enough for the two runs to meet
            record("end", {"ti": ti, "lease": lease}, tenant=tenant)
            return int(lease.token)

        bill.expand(tenant=tenants)
    return dag


lt_mapped_fwd = _mapped_dag("lt_mapped_fwd", TENANTS)
lt_mapped_rev = _mapped_dag("lt_mapped_rev", TENANTS[::-1])

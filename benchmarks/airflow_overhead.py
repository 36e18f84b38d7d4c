"""Added wall time of a leased Airflow task over a plain ``PythonOperator`` task.

Both DAGs run the same trivial callable through ``dag.test()`` in one
process, against a throwaway AIRFLOW_HOME (SQLite metadata DB) and the
embedded SQLite lease store, interleaved (plain, leased, plain, ...) after a
warm-up, so machine noise hits both alike. Reports medians of the whole DAG
run and of the task instance (start to end as Airflow records it), and the
ratio leased/plain.

Usage (from the repository root, in the Airflow environment):
    .venv-airflow/bin/python benchmarks/airflow_overhead.py [--quick] [--runs N] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

DAG_FILE = '''
from datetime import datetime, timezone
from airflow.sdk import DAG
from airflow.providers.standard.operators.python import PythonOperator
from lease_integrations.airflow import LeasedPythonOperator

def work():
    return sum(range(1000))

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
with DAG("bench_plain", schedule=None, start_date=START) as bench_plain:
    PythonOperator(task_id="job", python_callable=work)
with DAG("bench_leased", schedule=None, start_date=START) as bench_leased:
    LeasedPythonOperator(task_id="job", python_callable=work, lease_ttl=30)
'''


def setup_home() -> Path:
    home = Path(tempfile.mkdtemp(prefix="lease-bench-airflow-"))
    (home / "dags").mkdir()
    (home / "dags" / "bench_dags.py").write_text(DAG_FILE)
    os.environ.pop("AIRFLOW_CONN_LEASE_DEFAULT", None)
    os.environ.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
        "LEASE_STORE_URL": f"sqlite://{home}/leases.db",
    })
    subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return home


def run_once(dag: Any) -> tuple[float, float]:
    started = time.perf_counter()
    run = dag.test()
    wall = time.perf_counter() - started
    (ti,) = run.get_task_instances()
    if str(getattr(ti.state, "value", ti.state)) != "success":
        raise RuntimeError(f"{dag.dag_id} ended {ti.state}")
    return wall, (ti.end_date - ti.start_date).total_seconds()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=None, help="runs per DAG (default 15)")
    parser.add_argument("--quick", action="store_true", help="5 runs per DAG")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    runs = args.runs or (5 if args.quick else 15)

    home = setup_home()
    try:
        import runpy

        dags = runpy.run_path(str(home / "dags" / "bench_dags.py"))
        plain, leased = dags["bench_plain"], dags["bench_leased"]
        run_once(plain), run_once(leased)  # warm-up: the in-process API, imports, caches
        samples: dict[str, list[tuple[float, float]]] = {"plain": [], "leased": []}
        for _ in range(runs):
            samples["plain"].append(run_once(plain))
            samples["leased"].append(run_once(leased))
    finally:
        shutil.rmtree(home, ignore_errors=True)

    def median(kind: str, index: int) -> float:
        return statistics.median(s[index] for s in samples[kind])

    result = {
        "name": "Airflow task (dag.test, SQLite lease store)",
        "runs": runs,
        "plain_s": median("plain", 0),
        "leased_s": median("leased", 0),
        "added_ms": (median("leased", 0) - median("plain", 0)) * 1000,
        "ratio": median("leased", 0) / median("plain", 0),
        "task_plain_s": median("plain", 1),
        "task_leased_s": median("leased", 1),
        "task_added_ms": (median("leased", 1) - median("plain", 1)) * 1000,
        "task_ratio": median("leased", 1) / median("plain", 1),
    }
    print(f"Airflow leased task vs plain PythonOperator: median of {runs} interleaved runs")
    print(f"{'measure':<28}{'plain':>12}{'leased':>12}{'added':>12}{'ratio':>8}")
    for label, prefix in (("DAG run wall time (dag.test)", ""), ("task instance duration", "task_")):
        p, le = result[f"{prefix}plain_s"], result[f"{prefix}leased_s"]
        print(f"{label:<28}{p * 1000:>10.1f}ms{le * 1000:>10.1f}ms"
              f"{result[f'{prefix}added_ms']:>10.1f}ms{result[f'{prefix}ratio']:>8.3f}")
    if args.json:
        args.json.write_text(json.dumps(result))
    print(json.dumps(result))


if __name__ == "__main__":
    main()

"""Latency a DAG-run lease adds between a run's tasks, through Airflow's real
scheduler (LocalExecutor), triggerer and api-server in a temp AIRFLOW_HOME.

Two DAGs with the same three no-op tasks (a >> b >> c), one inside
``dag_run_lease(...)``; runs alternate between them, one at a time. For each
run: the gap from one task's callable to the next one's (task end,
scheduling, the next task's start and, leased, the guard's store read), the
work span (a's callable to c's) and the whole run (which also holds the
acquire, keeper and release tasks). Medians, and
leased / plain as ratios.

    .venv-airflow/bin/python benchmarks/airflow_dag_run_lease_latency.py [--runs N] [--quick]
        [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import textwrap
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "airflow"))

from scheduler_harness import AirflowCluster  # noqa: E402

DAG_FILE = textwrap.dedent('''
    import json, os, time
    from datetime import datetime
    from airflow.sdk import DAG, task
    from lease_integrations.airflow.dag_run_lease import dag_run_lease

    def mark(context):
        line = {"run_id": context["ti"].run_id, "task": context["ti"].task_id, "at": time.time()}
        with open(os.path.join(os.environ["RL_BENCH_RECORD"], "marks.jsonl"), "a") as out:
            out.write(json.dumps(line) + "\\n")

    def three():
        @task
        def a(**context): mark(context)
        @task
        def b(**context): mark(context)
        @task
        def c(**context): mark(context)
        a() >> b() >> c()

    with DAG(dag_id="rlb_plain", schedule=None, start_date=datetime(2026, 1, 1)):
        three()

    with DAG(dag_id="rlb_leased", schedule=None, start_date=datetime(2026, 1, 1)):
        with dag_run_lease(lease_key="rlb", lease_ttl=60, on_busy="fail"):
            three()
''')
RUN_WAIT = 300.0


def _ts(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def measure(cluster: AirflowCluster, dag_id: str, marks: Path) -> dict[str, float]:
    run_id = cluster.trigger(dag_id)
    state = cluster.wait_run(dag_id, run_id, RUN_WAIT)
    if state != "success":
        raise SystemExit(f"{dag_id} run {run_id} ended {state}")
    at = {m["task"]: m["at"] for m in map(json.loads, marks.read_text().splitlines())
          if m["run_id"] == run_id}
    run = cluster.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")
    return {
        # callable to callable: task end, scheduling, task start, and (leased) the guard
        "gap": statistics.mean([at["b"] - at["a"], at["c"] - at["b"]]),
        "span": at["c"] - at["a"],
        "run": _ts(run["end_date"]) - _ts(run["start_date"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="runs of each DAG (default 7)")
    parser.add_argument("--quick", action="store_true", help="3 runs of each")
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args()
    runs = 3 if args.quick else args.runs
    if runs < 1:
        raise SystemExit(f"--runs must be at least 1, got {runs}")

    with tempfile.TemporaryDirectory(prefix="rl-bench-") as tmp:
        dags = Path(tmp) / "dags"
        dags.mkdir()
        (dags / "rl_bench_dags.py").write_text(DAG_FILE)
        marks = Path(tmp) / "marks.jsonl"
        marks.touch()
        cluster = AirflowCluster(Path(tmp) / "home", dags,
                                 {"LEASE_STORE_URL": f"sqlite://{tmp}/leases.db",
                                  "RL_BENCH_RECORD": tmp})
        try:
            cluster.start()
            for dag_id in ("rlb_plain", "rlb_leased"):
                cluster.wait_dag(dag_id)
            measure(cluster, "rlb_plain", marks)  # warm-up: first parse in a worker, imports
            measure(cluster, "rlb_leased", marks)
            samples: dict[str, list[dict[str, float]]] = {"rlb_plain": [], "rlb_leased": []}
            for i in range(runs):
                for dag_id in ("rlb_plain", "rlb_leased"):
                    samples[dag_id].append(measure(cluster, dag_id, marks))
                print(f"run {i + 1}/{runs}: plain gap {samples['rlb_plain'][-1]['gap']:.2f} s, "
                      f"leased gap {samples['rlb_leased'][-1]['gap']:.2f} s", flush=True)
        finally:
            cluster.stop()

    def median(dag_id: str, what: str) -> float:
        return statistics.median(s[what] for s in samples[dag_id])

    result: dict[str, Any] = {"runs": runs}
    for what in ("gap", "span", "run"):
        plain, leased = median("rlb_plain", what), median("rlb_leased", what)
        result[what] = {"plain_s": round(plain, 3), "leased_s": round(leased, 3),
                        "added_ms": round((leased - plain) * 1000, 1),
                        "ratio": round(leased / plain, 3) if plain > 0 else None}
    result.update({"ratio": result["gap"]["ratio"], "plain_s": result["gap"]["plain_s"],
                   "leased_s": result["gap"]["leased_s"], "added_ms": result["gap"]["added_ms"]})
    print(f"\nmedian of {runs} runs each (leased / plain):")
    for what, label in (("gap", "between tasks"), ("span", "first task callable to last task callable"),
                        ("run", "whole DAG run (incl. acquire/release)")):
        r = result[what]
        print(f"  {label:44s} plain {r['plain_s']:7.2f} s   leased {r['leased_s']:7.2f} s   "
              f"added {r['added_ms']:8.1f} ms   ratio {r['ratio']}")
    if args.json:
        args.json.write_text(json.dumps(result))
    print(json.dumps(result))


if __name__ == "__main__":
    main()

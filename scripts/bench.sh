#!/usr/bin/env bash
# ./run bench [--quick] [--only SECTION ...] [--stores KIND ...] [--runs N] [--json PATH]
# Builds what the benchmarks need (core env with redis-py, python-redis-lock and
# pottery; the MongoDB-wire env; the Airflow/Prefect envs for the orchestrator
# section), then runs `python -m benchmarks`, which starts its own servers on
# 127.0.0.1 and stops them by PID when it ends. Tables go to stdout, progress to
# stderr, every figure to benchmarks/results/*.json.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
source scripts/envs.sh
ensure_core_env
ensure_servers
ensure_mongo_env
# The Airflow and Prefect envs take a while to build on a fresh clone: only when
# the orchestrator section will run in full (the smoke run uses them if present).
orch=1
[[ " $* " == *" --quick "* ]] && orch=0
[[ " $* " == *" --only "* && " $* " != *" orchestrators"* ]] && orch=0
if [ "$orch" = 1 ]; then ensure_airflow_env; ensure_prefect_env; fi
export PYTHONDONTWRITEBYTECODE=1
exec .venv/bin/python -m benchmarks "$@"

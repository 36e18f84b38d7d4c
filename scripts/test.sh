#!/usr/bin/env bash
# The whole test suite: lint, types, then every test phase in its environment.
# Each phase starts the servers it needs itself (pytest fixtures, 127.0.0.1,
# stopped at the end). Airflow and Prefect cannot share one environment at
# their latest releases (NOTES.md), so each has its own.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
source scripts/envs.sh
set -e
ensure_core_env
ensure_servers
ensure_browser
ensure_mongo_env
ensure_airflow_env
ensure_prefect_env
for v in 3.10 3.12 3.13; do ensure_compat_env "$v"; done
set +e

export LEASE_TEST_REQUIRE_ALL=1   # a missing server fails the run instead of skipping
failed=()
start=$SECONDS

phase() {  # name, command...
  local name="$1"; shift
  echo
  echo "==================== $name ===================="
  local t0=$SECONDS
  "$@"
  local rc=$?
  # pytest exit 5 = "no tests collected": an empty phase is a broken phase.
  if [ $rc -ne 0 ]; then failed+=("$name (exit $rc)"); fi
  echo "---- $name: exit $rc in $((SECONDS - t0)) s"
}

phase "ruff" .venv/bin/ruff check lease_integrations tests example_dags example_flows benchmarks
phase "mypy" .venv/bin/mypy
phase "core and stores" .venv/bin/pytest -q -p no:cacheprovider --durations=10 tests \
  --ignore=tests/airflow --ignore=tests/airflow_ui --ignore=tests/prefect "$@"
for v in 3.10 3.12 3.13; do
  phase "core on Python $v" ".venv-py$v/bin/pytest" -q -p no:cacheprovider tests/core tests/conformance \
    -k "memory or sqlite or not store" "$@"
done
phase "airflow" .venv-airflow/bin/pytest -q -p no:cacheprovider --durations=10 tests/airflow "$@"
phase "airflow ui" .venv-airflow/bin/pytest -q -p no:cacheprovider --durations=5 tests/airflow_ui "$@"
phase "prefect" .venv-prefect/bin/pytest -q -p no:cacheprovider --durations=10 tests/prefect "$@"

echo
echo "total: $((SECONDS - start)) s"
if [ ${#failed[@]} -ne 0 ]; then
  printf 'FAILED phase: %s\n' "${failed[@]}"
  exit 1
fi
echo "all phases passed"

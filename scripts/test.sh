#!/usr/bin/env bash
# The whole test suite: lint, types, docs, then every test phase in its environment.
# Each phase starts the servers it needs itself (pytest fixtures, 127.0.0.1 on
# free ports, stopped at the end), so independent phases run side by side:
# $LEASE_TEST_JOBS at a time (default 2, one per core of the CI machine kind).
# Airflow and Prefect cannot share one environment at their latest releases
# (docs/development.md), so each has its own at its newest release for the full
# suites; every admitted minor of each gets a smoke phase in an environment of
# its own, installed as its users install it (its newest patch with the
# dependencies of that patch's release days, constraints/release-days.txt); and
# the store tests run once more on the oldest store clients.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
source scripts/envs.sh
source scripts/versions.sh
set -e
ensure_core_env
ensure_servers
ensure_spin
ensure_browser
ensure_mongo_env
ensure_airflow_env
ensure_prefect_env
ensure_minor_envs
ensure_stores_oldest_env
ensure_docs_env
for v in 3.10 3.12 3.13; do ensure_compat_env "$v"; done
set +e

export LEASE_TEST_REQUIRE_ALL=1   # a missing server fails the run instead of skipping
export LEASE_TEST_AIRFLOW_PYTHON="$ROOT/.venv-airflow/bin/python"
export LEASE_TEST_PREFECT_PYTHON="$ROOT/.venv-prefect/bin/python"
JOBS="${LEASE_TEST_JOBS:-2}"
LOGS="$(mktemp -d "${TMPDIR:-/tmp}/lease-test.XXXXXX")"
PY=(-q -p no:cacheprovider)

names=()
cmds=()
phase() {  # name, command...  (queued; run below)
  names+=("$1"); shift
  cmds+=("$(printf '%q ' "$@")")
}

# Longest first, so the two slots stay busy to the end.
phase "airflow" .venv-airflow/bin/pytest "${PY[@]}" --durations=10 tests/airflow "$@"
# Airflow 2.11 as installed (its line in constraints/release-days.txt): the whole
# Airflow suite, dag.test() and the real scheduler (scheduler, triggerer,
# webserver; LocalTaskJob and the standard task runner), and the Leases page
# as 2.11's Flask AppBuilder view behind its real webserver.
phase "airflow 2.11 ($(minor_field airflow 2.11 3) as installed on $(minor_field airflow 2.11 5))" \
  "$(minor_env airflow 2.11)/bin/pytest" "${PY[@]}" --durations=10 tests/airflow tests/airflow2_ui "$@"
# The core env's tests in two phases of similar length: the slow fault, race
# and stateful tests (real server restarts, many processes) beside the rest.
SLOW_CORE=(tests/faults tests/race tests/safety tests/stateful)  # this order: safety imports its conftest by name
phase "faults, races and stateful" .venv/bin/pytest "${PY[@]}" --durations=10 "${SLOW_CORE[@]}" "$@"
phase "core, stores and console" .venv/bin/pytest "${PY[@]}" --durations=10 tests \
  --ignore=tests/airflow --ignore=tests/airflow_ui --ignore=tests/airflow2_ui --ignore=tests/prefect --ignore=tests/smoke \
  --ignore=tests/packaging "${SLOW_CORE[@]/#/--ignore=}" "$@"
phase "prefect" .venv-prefect/bin/pytest "${PY[@]}" --durations=10 tests/prefect "$@"
phase "airflow ui" .venv-airflow/bin/pytest "${PY[@]}" --durations=5 tests/airflow_ui "$@"
# The store tests on the oldest redis, psycopg and pymongo the extras admit.
phase "stores on their oldest clients ($STORES_OLDEST)" .venv-stores-min/bin/pytest "${PY[@]}" \
  --durations=5 tests/stores tests/conformance tests/upgrade "$@"
# A smoke phase per admitted minor (a line of constraints/release-days.txt), each
# in its own environment (scripts/envs.sh ensure_minor_env), in the file's order.
# Another minor is one more line there.
while read -r face minor; do
  phase "smoke: $face $minor ($(minor_field "$face" "$minor" 3) as installed on $(minor_field "$face" "$minor" 5))" \
    "$(minor_env "$face" "$minor")/bin/pytest" "${PY[@]}" "tests/smoke/test_${face}_smoke.py" "$@"
done < <(minor_lines)
phase "wheel and sdist" .venv/bin/pytest "${PY[@]}" tests/packaging "$@"
for v in 3.10 3.12 3.13; do
  phase "core on Python $v" ".venv-py$v/bin/pytest" "${PY[@]}" tests/core tests/conformance \
    -k "memory or sqlite or not store" "$@"
done
phase "support matrix (identical in 4 files)" check_support_matrix
phase "docs (mkdocs --strict)" env NO_MKDOCS_2_WARNING=1 .venv-docs/bin/mkdocs build --strict --quiet --site-dir "$LOGS/site"
phase "ruff" .venv/bin/ruff check lease_integrations tests example_dags example_flows benchmarks
phase "mypy" .venv/bin/mypy

check_support_matrix() {  # the block between the support-matrix markers, the same everywhere
  local f first="" block
  for f in README.md docs/index.md docs/getting-started.md docs/development.md; do
    block="$(sed -n '/^<!-- support-matrix/,/^<!-- \/support-matrix -->/p' "$f")"
    [ -n "$block" ] || { echo "$f: no support matrix between the markers"; return 1; }
    if [ -z "$first" ]; then first="$block"
    elif [ "$block" != "$first" ]; then
      echo "$f: its support matrix differs from README.md's:"; diff <(echo "$first") <(echo "$block"); return 1
    fi
  done
  echo "support matrix identical in README.md, docs/index.md, docs/getting-started.md, docs/development.md"
}

run_phase() {  # index: output to its own log, exit code and seconds beside it
  local i="$1" t0=$SECONDS rc
  # Each phase its own pytest temp root: concurrent sessions never clean up each other's.
  ( export PYTEST_ADDOPTS="--basetemp=$LOGS/tmp-$i"; eval "${cmds[$i]}" ) >"$LOGS/$i.log" 2>&1
  rc=$?
  echo "$rc $((SECONDS - t0))" >"$LOGS/$i.rc"
  echo "     done: ${names[$i]} (exit $rc, $((SECONDS - t0)) s)" >&2
}

start=$SECONDS
echo "running ${#names[@]} phases, $JOBS at a time; logs in $LOGS" >&2
for i in "${!names[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
  echo "  started: ${names[$i]}" >&2
  run_phase "$i" &
done
wait

# Every phase's output, in order, whole.
failed=()
for i in "${!names[@]}"; do
  read -r rc secs <"$LOGS/$i.rc" 2>/dev/null || { rc=99; secs=0; }
  echo
  echo "==================== ${names[$i]} ===================="
  cat "$LOGS/$i.log"
  # pytest exit 5 = "no tests collected": an empty phase is a broken phase.
  if [ "$rc" -ne 0 ]; then
    moved="$(moved_versions "$(_env_of_phase "${cmds[$i]}")")"
    # pytest's own short summary of what failed, so the run's last lines name the tests
    tests_failed="$(grep -E '^(FAILED|ERROR) ' "$LOGS/$i.log" | head -20 | sed 's/^/    /')"
    failed+=("${names[$i]} (exit $rc)${moved:+$'\n'    $moved}${tests_failed:+$'\n'$tests_failed}")
  fi
  echo "---- ${names[$i]}: exit $rc in $secs s"
done

echo
echo "total: $((SECONDS - start)) s wall, $JOBS phases at a time"
if [ ${#failed[@]} -ne 0 ]; then
  printf 'FAILED phase: %s\n' "${failed[@]}"
  exit 1
fi
rm -rf "$LOGS"
echo "all phases passed"
if [ $# -eq 0 ]; then  # a whole run: what it resolved is the new last green world
  envs=(); for c in "${cmds[@]}"; do envs+=("$(_env_of_phase "$c")"); done
  record_green_versions "${envs[@]}"
  echo "package versions recorded in $LAST_GREEN (commit it)"
fi

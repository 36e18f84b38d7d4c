#!/usr/bin/env bash
# Implementation of ./run (kept here so ./run stays readable).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
source scripts/envs.sh

cmd="${1:-help}"
shift || true
case "$cmd" in
  demo)
    ensure_core_env
    exec .venv/bin/python -m lease_integrations.demo "$@"
    ;;
  test)
    exec bash scripts/test.sh "$@"
    ;;
  bench)
    exec bash scripts/bench.sh "$@"
    ;;
  docs)
    # The documentation site, strict: a broken link, nav entry or API reference fails.
    ensure_docs_env
    export NO_MKDOCS_2_WARNING=1  # the theme's end-of-life banner, not a build problem
    exec .venv-docs/bin/mkdocs build --strict --site-dir "${LEASE_DOCS_SITE:-site}" "$@"
    ;;
  setup)
    # ./run setup: everything ./run test needs. ./run setup airflow|prefect: only
    # .venv and that face's environment (newest release, with the [test] extra);
    # no servers, browser or other environments. ./run setup airflow-2.11 (any
    # line of constraints/release-days.txt): that release as its users install it.
    case "${1:-all}" in
      all)
        ensure_core_env; ensure_servers; ensure_browser; ensure_mongo_env; ensure_airflow_env; ensure_prefect_env
        ensure_minor_envs; ensure_docs_env
        ;;
      airflow) ensure_airflow_env; echo "Airflow environment: .venv-airflow (.venv-airflow/bin/airflow)" >&2 ;;
      prefect) ensure_prefect_env; echo "Prefect environment: .venv-prefect (.venv-prefect/bin/prefect)" >&2 ;;
      airflow-*|prefect-*)
        face="${1%%-*}"; minor="${1#*-}"
        ensure_minor_env "$face" "$minor" || {
          echo "known: $(minor_lines | tr ' ' '-' | tr '\n' ' ')" >&2; exit 2; }
        echo "$face $minor environment: $(minor_env "$face" "$minor") ($(minor_env "$face" "$minor")/bin/$face)" >&2 ;;
      *) echo "usage: ./run setup [airflow | prefect | airflow-2.11 | FACE-MINOR]" >&2; exit 2 ;;
    esac
    ;;
  *)
    echo "usage: ./run demo | test | bench | docs | setup [airflow | prefect | airflow-2.11]" >&2
    exit 2
    ;;
esac

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
    ensure_core_env; ensure_servers; ensure_browser; ensure_mongo_env; ensure_airflow_env; ensure_prefect_env
    ensure_airflow_oldest_env; ensure_prefect_oldest_env; ensure_docs_env
    ;;
  *)
    echo "usage: ./run demo | test | bench | docs | setup" >&2
    exit 2
    ;;
esac

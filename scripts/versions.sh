# Sourced by scripts/test.sh: which package versions each freshly resolved
# environment had at the last green run, and which moved since. The test command
# resolves the newest releases on purpose (no lock file), so a new upstream
# release can break a phase overnight; a failed phase's summary then names what
# moved ("redis 8.1.0 -> 8.2.0") beside the failure.
#
# The record, scripts/last-green.txt, is rewritten by a green `./run test` (with no
# extra arguments) and committed like any file. Environments installed as of a
# fixed day (the per-minor ones, --exclude-newer) cannot move and are not recorded.

LAST_GREEN=scripts/last-green.txt

_env_of_phase() {  # a phase's command line -> the environment it runs in (or nothing)
  grep -o '\.venv[A-Za-z0-9._-]*/bin/' <<<"$1" | head -n1 | sed 's|/bin/$||'
}

_moving_env() {  # dir: resolved fresh on every build (not installed as of a release day)
  [ -x "$1/bin/python" ] && ! [[ "$1" =~ ^\.venv-(airflow|prefect)-[0-9] ]]
}

_freeze() {  # dir -> "dir name version" per installed distribution (not the project itself)
  _uv pip freeze --python "$1/bin/python" 2>/dev/null \
    | sed -n 's/^\([A-Za-z0-9._-]*\)==\([^ ;]*\).*/\1 \2/p' | sed "s|^|$1 |"
}

record_green_versions() {  # envs... : rewrite the record from what they have now
  local env
  {
    echo "# Package versions of the freshly resolved environments at the last green ./run test"
    echo "# (scripts/versions.sh). $(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
    for env in $(printf '%s\n' "$@" | sort -u); do
      _moving_env "$env" && _freeze "$env"
    done
  } >"$LAST_GREEN.new" && mv "$LAST_GREEN.new" "$LAST_GREEN"
}

moved_versions() {  # env: one line naming what moved since the record, or why nothing can be said
  local env="$1" moved
  [ -n "$env" ] || return 0
  _moving_env "$env" || { echo "$env: installed as of a fixed day; no version moved"; return 0; }
  grep -q "^$env " "$LAST_GREEN" 2>/dev/null || { echo "$env: no record in $LAST_GREEN"; return 0; }
  moved="$(LC_ALL=C join -a1 -a2 -e '(none)' -o 0,1.2,2.2 \
      <(grep "^$env " "$LAST_GREEN" | cut -d' ' -f2- | LC_ALL=C sort -k1,1) \
      <(_freeze "$env" | cut -d' ' -f2- | LC_ALL=C sort -k1,1) \
    | awk '$2 != $3 { printf "%s%s %s -> %s", sep, $1, $2, $3; sep = ", " }')"
  echo "$env, moved since the last green run ($(sed -n '2s/.*\. //p' "$LAST_GREEN")): ${moved:-nothing}"
}

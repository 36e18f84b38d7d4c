# Sourced by the run scripts: builds each virtualenv once, then reuses it.
# A stamp file holds the hash of pyproject.toml, this file and constraints/ so an
# edited dependency list rebuilds the environment instead of testing against a stale one.

export UV_PYTHON_DOWNLOADS=never
PY311="$(ls -d "$HOME"/.pyenv/versions/3.11.*/bin/python 2>/dev/null | tail -n1 || true)"
PY313="$(ls -d "$HOME"/.pyenv/versions/3.13.*/bin/python 2>/dev/null | tail -n1 || true)"
[ -n "$PY311" ] || PY311="$(command -v python3.11 || command -v python3)"

_stamp() { sha1sum pyproject.toml scripts/envs.sh constraints/*.txt | sha1sum | cut -c1-16; }

_uv() {
  # uv lives in the core env; it resolves Airflow in seconds where pip takes minutes.
  .venv/bin/uv "$@"
}

_compile() {  # env dir: its site-packages compiled to bytecode, once, when it is built
  # uv installs no .pyc files and the test processes run with
  # PYTHONDONTWRITEBYTECODE=1, so every Airflow or Prefect process compiled its
  # framework from source again (`airflow version` on 3.3: 6.6 s, 3.0 s with
  # bytecode; compiling .venv-airflow takes about 22 s on two cores). Here,
  # not through uv, so that an environment built before also gets it. A file
  # that does not compile (a template, another Python's syntax) stays source.
  local site
  site="$("$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  "$1/bin/python" -m compileall -q -j 0 "$site" >/dev/null 2>&1 || true
}

ensure_core_env() {
  local want; want="core-$(_stamp)"
  if [ -f .venv/.stamp ] && [ "$(cat .venv/.stamp)" = "$want" ]; then return; fi
  echo "==> building .venv (core, stores, test and lint tools)" >&2
  [ -x .venv/bin/python ] || "$PY311" -m venv .venv
  .venv/bin/python -m pip install -q --disable-pip-version-check uv
  _uv pip install -q --python .venv/bin/python -e ".[dev,otel]"
  _compile .venv
  echo "$want" > .venv/.stamp
}

_ensure_extra_env() {  # name python extras [more requirements...]
  local dir="$1" py="$2" extras="$3" want
  shift 3
  want="$dir-$(_stamp)"
  if [ -f "$dir/.stamp" ] && [ "$(cat "$dir/.stamp")" = "$want" ]; then return; fi
  echo "==> building $dir ($extras${*:+ $*})" >&2
  [ -x "$dir/bin/python" ] || _uv venv -q --python "$py" "$dir"
  _uv pip install -q --python "$dir/bin/python" -e ".[$extras]" "$@"
  _compile "$dir"
  echo "$want" > "$dir/.stamp"
}

ensure_compat_env() {  # version (3.10, 3.12, 3.13): the core on every supported Python
  local ver="$1" py
  py="$(ls -d "$HOME"/.pyenv/versions/"$ver".*/bin/python 2>/dev/null | tail -n1 || true)"
  [ -n "$py" ] || { echo "Python $ver not found under ~/.pyenv" >&2; return 1; }
  ensure_core_env
  _ensure_extra_env ".venv-py$ver" "$py" "test"
}

ensure_airflow_env() { ensure_core_env; _ensure_extra_env .venv-airflow "$PY311" "airflow,test"; }
ensure_prefect_env() { ensure_core_env; _ensure_extra_env .venv-prefect "$PY311" "prefect,test"; }

# One environment per admitted Airflow and Prefect minor, installed as its users
# install it: its newest patch with the dependencies that existed a few days
# after that patch's upload (`uv pip install --exclude-newer DAY`, the same world
# as the release's own constraints file), no hand pins. The patches and days are
# in constraints/release-days.txt (how each day was found: its header). Only
# pytest beside them: the [test] extra brings SQLAlchemy 2 and store clients the
# smoke tests do not use.
RELEASE_DAYS=constraints/release-days.txt
SMOKE_TOOLS=("pytest>=8" "pytest-timeout>=2.3")
# Airflow 2.11's environment also runs the whole Airflow suite (the phase
# "airflow 2.11"): the test tools beside it, as its SQLAlchemy 1.4 rules out the
# [test] extra (SQLAlchemy 2); psycopg2 is SQLAlchemy 1.4's PostgreSQL driver,
# for the real-scheduler tests' metadata DB.
AIRFLOW_2_TOOLS=("${SMOKE_TOOLS[@]}" "httpx>=0.27" "websockets>=12" "redis>=5.0"
  "psycopg[binary]>=3.2.1" "pymongo>=4.6" "psycopg2-binary>=2.9")
minor_lines() {  # "face minor" per line, in the file's order
  awk '!/^#/ && NF { print $1, $2 }' "$RELEASE_DAYS"
}
minor_field() {  # face minor field (3 = requirement, 5 = day)
  awk -v face="$1" -v minor="$2" -v n="$3" '$1 == face && $2 == minor { print $n }' "$RELEASE_DAYS"
}
minor_env() { echo ".venv-$1-$2"; }  # face minor
ensure_minor_env() {  # face minor
  local req day
  local tools=("${SMOKE_TOOLS[@]}")
  [ "$1 $2" != "airflow 2.11" ] || tools=("${AIRFLOW_2_TOOLS[@]}")
  req="$(minor_field "$1" "$2" 3)"; day="$(minor_field "$1" "$2" 5)"
  [ -n "$day" ] || { echo "$RELEASE_DAYS has no line for $1 $2" >&2; return 1; }
  ensure_core_env
  _ensure_extra_env "$(minor_env "$1" "$2")" "$PY311" "$1" --exclude-newer "$day" "$req" "${tools[@]}"
}
ensure_minor_envs() {  # every line of the file
  local face minor
  while read -r face minor; do ensure_minor_env "$face" "$minor" </dev/null || return; done < <(minor_lines)
}

_pinned() {  # constraints file, distribution: the version the file pins
  sed -n "s/^$2==\([^ ;#]*\).*/\1/p" "$1"
}

# The oldest store clients the extras allow (redis, psycopg and pymongo at their
# floors in pyproject.toml), pinned by constraints/stores-oldest.txt, with the
# [test] extra for the store tests. On Python 3.10, the oldest the project
# supports (the other store phases run on 3.11). Only the clients are old: the
# MongoDB-wire server still runs from .venv-mongo.
STORES_OLDEST="$(for d in redis psycopg pymongo; do
  printf '%s %s, ' "$d" "$(_pinned constraints/stores-oldest.txt "$d")"; done)"
STORES_OLDEST="${STORES_OLDEST%, }"
ensure_stores_oldest_env() {
  local py
  py="$(ls -d "$HOME"/.pyenv/versions/3.10.*/bin/python 2>/dev/null | tail -n1 || true)"
  [ -n "$py" ] || { echo "Python 3.10 not found under ~/.pyenv" >&2; return 1; }
  ensure_core_env
  _ensure_extra_env .venv-stores-min "$py" "redis,postgres,mongo,test" -c constraints/stores-oldest.txt
}

# MkDocs, Material and mkdocstrings for the documentation site (./run docs).
ensure_docs_env() { ensure_core_env; _ensure_extra_env .venv-docs "$PY311" "docs"; }

ensure_mongo_env() {
  # The MongoDB-wire test server (mongoeco) needs Python >= 3.13; pymongo must sit
  # beside it or the server closes every connection at once (docs/development.md).
  ensure_core_env
  local want; want="mongo-$(_stamp)"
  if [ -f .venv-mongo/.stamp ] && [ "$(cat .venv-mongo/.stamp)" = "$want" ]; then return; fi
  [ -n "$PY313" ] || { echo "Python 3.13 not found under ~/.pyenv (needed for the MongoDB-wire server)" >&2; return 1; }
  echo "==> building .venv-mongo (MongoDB-wire server)" >&2
  [ -x .venv-mongo/bin/python ] || _uv venv -q --python "$PY313" .venv-mongo
  _uv pip install -q --python .venv-mongo/bin/python "mongoeco>=4.11" "pymongo>=4.6"
  _compile .venv-mongo
  echo "$want" > .venv-mongo/.stamp
}

ensure_servers() {
  # redis-server from Debian; PostgreSQL binaries are already on this machine kind.
  if ! command -v redis-server >/dev/null 2>&1; then
    echo "==> installing redis-server (Debian package)" >&2
    if [ "$(id -u)" = 0 ]; then
      apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
    else
      sudo apt-get update -qq >/dev/null && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
    fi
  fi
  export LEASE_TEST_REDIS_SERVER="$(command -v redis-server)"
  local pgbin
  pgbin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1 || true)"
  if [ -z "$pgbin" ]; then
    echo "==> installing PostgreSQL (Debian package)" >&2
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    pgbin="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n1)"
  fi
  export LEASE_TEST_PG_BIN="$pgbin"
  export LEASE_TEST_MONGO_PYTHON="$ROOT/.venv-mongo/bin/python"
}

ensure_spin() {
  # Debian's SPIN model checker for tests/proof (proof/lease.pml); the system cc compiles its verifier.
  if command -v spin >/dev/null 2>&1; then return; fi
  echo "==> installing spin (Debian package)" >&2
  local sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq >/dev/null && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq spin >/dev/null
}

ensure_browser() {
  # Debian's chromium for the Airflow UI test (tests/airflow_ui), driven over
  # the DevTools protocol: nothing is downloaded when the tests run.
  if command -v chromium >/dev/null 2>&1; then return; fi
  echo "==> installing chromium (Debian package)" >&2
  local sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq >/dev/null && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
}

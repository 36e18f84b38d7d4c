"""The Connection commands the docs give, run with Airflow 2.11's own CLI
against the suite's webserver's metadata DB (issue 40, newcomer items):
``--conn-json`` keeps the type ``redis`` and prints the password masked,
and ``leasectl --airflow-conn`` then reads that store; ``--conn-type
redis`` is stored as ``generic`` (no Redis provider registers the type),
and the error then says which command works. The store is the
password-protected Redis of ``guarded_redis.py``; no output holds its
password. ``leasectl --airflow-conn`` prints none of Airflow's own
deprecation warnings."""

from __future__ import annotations

import json
import subprocess
import uuid

from guarded_redis import USER
from security.leaks import PASSWORD, assert_no_secret
from webserver2 import BIN, Webserver2

from lease_integrations import LeaseStore
from lease_integrations.console import exits


def run(webserver: Webserver2, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(webserver.env)
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=300,
                          stdin=subprocess.DEVNULL)


def test_conn_json_keeps_the_type_masks_the_password_and_leasectl_reads_it(
        webserver: Webserver2, guarded: LeaseStore, key: str) -> None:
    assert guarded.acquire(key, "worker:1", "s1", 600, {"dag_id": "billing"}).granted
    port = int(guarded.url.rsplit(":", 1)[1].split("/")[0])
    conn_id = f"lease_json_{uuid.uuid4().hex[:6]}"
    added = run(webserver, str(BIN / "airflow"), "connections", "add", conn_id, "--conn-json",
                json.dumps({"conn_type": "redis", "host": "127.0.0.1", "port": port,
                            "login": USER, "password": PASSWORD, "schema": "0"}))
    assert added.returncode == 0, added.stderr[-2000:]
    assert_no_secret(added.stdout, added.stderr)
    assert "Successfully added" in added.stdout and "redis://" in added.stdout
    listed = run(webserver, str(BIN / "leasectl"), "--airflow-conn", conn_id, "list", key)
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert key in listed.stdout
    assert_no_secret(listed.stdout, listed.stderr)
    # Airflow 2.11's own deprecation warnings were printed on every call.
    assert "Warning" not in listed.stderr, listed.stderr


def test_conn_type_redis_on_2_11_is_generic_and_the_error_says_what_works(
        webserver: Webserver2, guarded: LeaseStore) -> None:
    port = guarded.url.rsplit(":", 1)[1].split("/")[0]
    conn_id = f"lease_typed_{uuid.uuid4().hex[:6]}"
    added = run(webserver, str(BIN / "airflow"), "connections", "add", conn_id, "--conn-type",
                "redis", "--conn-host", "127.0.0.1", "--conn-port", port, "--conn-login", USER,
                "--conn-password", PASSWORD)
    assert added.returncode == 0, added.stderr[-2000:]
    assert_no_secret(added.stdout, added.stderr)
    listed = run(webserver, str(BIN / "leasectl"), "--airflow-conn", conn_id, "list")
    assert listed.returncode == exits.USAGE, listed
    assert "'generic'" in listed.stderr and "--conn-json" in listed.stderr, listed.stderr
    assert_no_secret(listed.stdout, listed.stderr)

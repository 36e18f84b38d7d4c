"""Airflow Connections -> store URLs: the mapping for every supported type
(pure: fields in, URL out), and resolution through Airflow's own lookup
(``AIRFLOW_CONN_*``) inside real task runs against real servers."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

try:  # Airflow 3
    from airflow.sdk import Connection
except ImportError:  # Airflow 2.11
    from airflow.models import Connection
from harness import events, result_for

from lease_integrations import ConfigurationError, connect
from lease_integrations.airflow.connections import store_url_from_connection
from lease_integrations.core.config import mask_url


def from_uri(uri: str, conn_id: str) -> Connection:
    if hasattr(Connection, "from_uri"):  # Airflow 3
        return Connection.from_uri(uri, conn_id=conn_id)
    return Connection(conn_id=conn_id, uri=uri)  # Airflow 2.11


def conn(conn_type: str, **fields: Any) -> Connection:
    extra = fields.pop("extra", None)
    return Connection(conn_id="lease_default", conn_type=conn_type,
                      extra=json.dumps(extra) if extra is not None else None, **fields)


@pytest.mark.parametrize(("connection", "url"), [
    (conn("redis", host="cache.internal", port=6380, password="s3cr:t/",
          extra={"db": 3, "ssl": True, "prefix": "leases:", "ssl_cert_reqs": "none"}),
     "rediss://:s3cr%3At%2F@cache.internal:6380/3?prefix=leases%3A"),
    (from_uri("redis://user:p%40ss@h:6379/2", conn_id="lease_default"),
     "redis://user:p%40ss@h:6379/2"),
    (conn("redis", host="localhost"), "redis://localhost/0"),
    (conn("postgres", host="db", port=5432, login="app", password="pw", schema="jobs",
          extra={"sslmode": "require", "table": "leases", "cursor": "dictcursor"}),
     "postgresql://app:pw@db:5432/jobs?sslmode=require&table=leases"),
    (from_uri("postgresql://app:pw@db:5433/ops", conn_id="lease_default"),
     "postgresql://app:pw@db:5433/ops"),
    (conn("mongo", host="cluster.example.net", port=27017, login="u", password="mongo-pw",
          schema="ops", extra={"srv": True, "ssl": True, "authSource": "admin"}),
     "mongodb+srv://u:mongo-pw@cluster.example.net/ops?authSource=admin&tls=true"),
    (conn("mongo", host="10.0.0.5", port=27018, schema="ops",
          extra={"lease_options": {"collection": "leases"}}),
     "mongodb://10.0.0.5:27018/ops?collection=leases"),
    (conn("sqlite", host="/var/lib/airflow/leases.db", extra={"timeout": 5}),
     "sqlite:///var/lib/airflow/leases.db?timeout=5"),
])
def test_connection_maps_to_store_url(connection: Connection, url: str) -> None:
    assert store_url_from_connection(connection) == url
    if connection.password:
        assert connection.password not in mask_url(url)


@pytest.mark.parametrize(("connection", "named"), [
    (conn("http", host="example.com"), "'http'"),
    (conn("sqlite", host="relative/leases.db"), "relative/leases.db"),
    (conn("sqlite"), "names no database file"),
    (conn("redis"), "has no host"),
    (conn("postgres", host="db", extra={"lease_options": "[1]"}), "lease_options"),
])
def test_unusable_connection_is_a_configuration_error(connection: Connection, named: str) -> None:
    with pytest.raises(ConfigurationError, match="lease_default") as info:
        store_url_from_connection(connection)
    assert named in str(info.value)


#: Spellings of a TLS flag that Airflow reads as true (``airflow.utils.strings.
#: to_boolean``, and the JSON true and 1 its providers pass on as true) or false.
TLS_ON = [True, 1, "true", "True", "TRUE", "t", "yes", "y", "on", "1", " yes ", "YES\n"]
TLS_OFF = [False, 0, "false", "False", "f", "no", "n", "off", "0", "", None]


@pytest.mark.parametrize("value", TLS_ON)
def test_a_tls_flag_that_airflow_reads_as_true_means_tls(value: object) -> None:
    """Issue 40, finding 3: ``1`` (a JSON number) and ``"yes "`` meant no TLS."""
    assert store_url_from_connection(conn("redis", host="h", password="pw",
                                          extra={"ssl": value})).startswith("rediss://")
    mongo = store_url_from_connection(conn("mongo", host="h", extra={"ssl": value}))
    assert "tls=true" in mongo
    assert store_url_from_connection(
        conn("mongo", host="h", extra={"srv": value})).startswith("mongodb+srv://")


@pytest.mark.parametrize("value", TLS_OFF)
def test_a_tls_flag_that_airflow_reads_as_false_means_none(value: object) -> None:
    assert store_url_from_connection(conn("redis", host="h", password="pw",
                                          extra={"ssl": value})).startswith("redis://")
    assert "tls" not in store_url_from_connection(conn("mongo", host="h", extra={"ssl": value}))


@pytest.mark.parametrize("value", ["ture", "yes please", "enabled", 2, -1, 0.5, [True], {"on": 1}])
@pytest.mark.parametrize(("conn_type", "field"), [("redis", "ssl"), ("mongo", "ssl"), ("mongo", "srv")])
def test_any_other_tls_flag_is_refused_naming_field_and_value(
        value: object, conn_type: str, field: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        store_url_from_connection(conn(conn_type, host="h", password="s3cret-pw",
                                       extra={field: value}))
    message = str(info.value)
    assert f"extra {field!r}" in message and repr(value) in message and "lease_default" in message
    assert "s3cret-pw" not in message


def as_airflow_conn(url: str, conn_type: str) -> str:
    """A Connection as a user would fill in the form (host, port, login, ...)."""
    parts = urlsplit(url)
    fields: dict[str, Any] = {"conn_type": conn_type, "host": parts.hostname,
                              "port": parts.port, "login": parts.username,
                              "password": parts.password}
    path = parts.path.strip("/")
    if conn_type == "redis":
        fields["extra"] = {"db": int(path or 0)}
    elif path:
        fields["schema"] = path
    return json.dumps({k: v for k, v in fields.items() if v is not None})


def test_connections_resolve_inside_task_runs(run_dags: Any, record_dir: Path, tmp_path: Path,
                                              redis_url: str, postgres_url: str) -> None:
    default_db = tmp_path / "default-conn.db"
    named_db = tmp_path / "named-conn.db"
    env = {
        "AIRFLOW_CONN_LEASE_DEFAULT": json.dumps({"conn_type": "sqlite", "host": str(default_db)}),
        "AIRFLOW_CONN_LEASE_SQLITE": json.dumps({"conn_type": "sqlite", "host": str(named_db)}),
        "AIRFLOW_CONN_LEASE_REDIS": as_airflow_conn(redis_url, "redis"),
        "AIRFLOW_CONN_LEASE_PG": as_airflow_conn(postgres_url, "postgres"),
    }
    proc = run_dags("lt_conn", "lt_conn_missing", name="conn", env=env)
    results = proc.wait()
    tasks = result_for(results, "lt_conn")["tasks"]
    assert tasks == dict.fromkeys(("lease_default", "lease_sqlite", "lease_redis", "lease_pg"),
                                  "success"), proc.tail()

    ran = {e["task_id"]: e for e in events(record_dir) if e["event"] == "start"}
    stores = {"lease_default": f"sqlite://{default_db}", "lease_sqlite": f"sqlite://{named_db}",
              "lease_redis": redis_url, "lease_pg": postgres_url}
    for task_id, url in stores.items():
        with connect(url) as store:
            record = store.get(f"airflow/lt_conn/{task_id}")
        assert record is not None, f"{task_id} did not use {url}"
        assert record.token == ran[task_id]["token"]
    # ...and not the LEASE_STORE_URL fallback, which a defined lease_default overrides.
    with connect(os.environ["LEASE_STORE_URL"]) as fallback:
        assert fallback.list("airflow/lt_conn/") == []

    # A connection id that does not exist fails the task, naming it (strict by default).
    assert result_for(results, "lt_conn_missing")["tasks"]["job"] == "failed"
    assert "lease_conn_id='lease_nope': no such Airflow connection" in proc.output()
    # Passwords never reach the task log.
    pg_password = urlsplit(postgres_url).password
    assert not pg_password or pg_password not in proc.output()


def test_every_passed_through_extra_is_an_option_its_store_accepts() -> None:
    """An extra copied into the URL that the store does not know would make
    every task fail with "unknown option": each must be one the store takes."""
    from pymongo import common

    from lease_integrations.airflow.connections import PASSTHROUGH
    from lease_integrations.stores import postgres, redis_connect

    accepted = {
        "redis": {"prefix", "allow_eviction", *redis_connect._CONNECTION_OPTIONS},
        "postgres": set(postgres.OPTIONS),
        "mongo": {"collection", *(name for name in common.VALIDATORS)},
        "sqlite": {"timeout"},  # sqlite.py: query_options(..., {"timeout": float})
    }
    for kind, names in PASSTHROUGH.items():
        unknown = [n for n in names if n not in accepted[kind] and n.lower() not in accepted[kind]]
        assert not unknown, f"{kind} extras the store would refuse: {unknown}"

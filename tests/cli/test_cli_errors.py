"""Exit codes scripts rely on, where the URL comes from, and masked passwords."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from cli_helpers import Leasectl

from lease_integrations import connect
from lease_integrations.console import exits

SECRET = "s3cret-Pa55"


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_help_documents_the_exit_codes(leasectl: Leasectl) -> None:
    for args in (("--help",), ("break", "--help")):
        result = leasectl(*args)
        assert result.code == 0
        for line in ("0  ok", "1  not found", "2  usage or configuration error",
                     "3  store unavailable", "4  break refused: --yes was not given"):
            assert line in result.out, (args, line)


@pytest.mark.parametrize("args, names", [
    ((), "COMMAND"),
    (("frobnicate",), "frobnicate"),
    (("show",), "key"),
    (("history", "k", "-n", "0"), "got 0"),
    (("history", "k", "-n", "lots"), "'lots'"),
    (("show", "bad key!"), "'bad key!'"),
    (("--url", "bogus://x", "list"), "'bogus'"),
    (("--url", "redis://h:99999/0", "list"), "99999"),
])
def test_usage_and_configuration_errors_exit_2(args: tuple[str, ...], names: str,
                                               leasectl: Leasectl, tmp_path: Path) -> None:
    result = leasectl(*args, env={"XDG_STATE_HOME": str(tmp_path)})
    assert result.code == exits.USAGE, result
    assert names in result.err
    assert result.out == ""


def test_a_missing_sqlite_file_is_unavailable_and_not_created(leasectl: Leasectl,
                                                              tmp_path: Path) -> None:
    path = tmp_path / "typo.db"
    result = leasectl("--url", f"sqlite://{path}", "list")
    assert result.code == exits.UNAVAILABLE
    assert str(path) in result.err
    assert not path.exists()


def test_a_corrupt_sqlite_file_is_unavailable(leasectl: Leasectl, tmp_path: Path) -> None:
    path = tmp_path / "leases.db"
    path.write_bytes(b"this is not a database, it is a text file " * 100)
    result = leasectl("--url", f"sqlite://{path}", "show", "k")
    assert result.code == exits.UNAVAILABLE, result
    assert "store unavailable" in result.err


def test_an_unreachable_redis_is_unavailable_with_the_password_masked(
    leasectl: Leasectl,
) -> None:
    pytest.importorskip("redis")
    url = f"redis://ops:{SECRET}@127.0.0.1:{closed_port()}/0"
    for args in (("list",), ("show", "k"), ("history", "k", "--json"), ("break", "k", "--yes")):
        result = leasectl("--url", url, *args)
        assert result.code == exits.UNAVAILABLE, (args, result)
        assert "ops:***@127.0.0.1" in result.err
        assert SECRET not in result.err + result.out


def test_a_working_store_url_is_printed_with_the_password_masked(
    redis_url: str, key: str, leasectl: Leasectl
) -> None:
    # The test server has no password; Redis accepts any for the "default" user then.
    url = redis_url.replace("redis://", f"redis://default:{SECRET}@", 1)
    store = connect(url)
    try:
        assert store.acquire(key, "h:1:0000000000000001", "h:1:0000000000000001", 30, {}).granted
    finally:
        store.close()
    for args in (("list", key), ("show", key), ("history", key), ("list", key, "--json"),
                 ("show", key, "--json"), ("history", key, "--json")):
        result = leasectl("--url", url, *args)
        assert result.code == 0, (args, result)
        assert "default:***@" in result.out
        assert SECRET not in result.out + result.err


def test_url_comes_from_the_environment_then_the_embedded_default(
    leasectl: Leasectl, tmp_path: Path, key: str
) -> None:
    env_db = tmp_path / "env.db"
    store = connect(f"sqlite://{env_db}")
    assert store.acquire(key, "env:1:0000000000000001", "env:1:0000000000000001", 30, {}).granted
    store.close()
    from_env = leasectl("list", "--json", env={"LEASE_STORE_URL": f"sqlite://{env_db}"})
    assert from_env.code == 0, from_env.err
    assert [item["key"] for item in json.loads(from_env.out)["leases"]] == [key]

    # No --url, no $LEASE_STORE_URL: the embedded default under $XDG_STATE_HOME.
    state = tmp_path / "state"
    env = {"XDG_STATE_HOME": str(state), "AIRFLOW_HOME": ""}
    default_db = state / "lease_integrations" / "leases.db"
    missing = leasectl("list", env=env)
    assert missing.code == exits.UNAVAILABLE and str(default_db) in missing.err
    default_db.parent.mkdir(parents=True)
    store = connect(f"sqlite://{default_db}")
    assert store.acquire(f"{key}-default", "d:1:0000000000000001", "d:1:0000000000000001", 30, {}).granted
    store.close()
    listed = leasectl("list", env=env)
    assert listed.code == 0, listed.err
    assert f"in sqlite://{default_db}" in listed.out and f"{key}-default" in listed.out

"""leasectl never prints a password: whatever the URL's shape, from --url or
$LEASE_STORE_URL, failing or working, on stdout and stderr."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from cli_helpers import Leasectl
from security.leaks import ENCODED, PASSWORD, assert_no_secret, url_shapes
from security.secret_servers import postgres_role_url, redis_acl_url
from servers.redis_server import free_port

from lease_integrations import LeaseLock, connect
from lease_integrations.console import exits

__all__ = ["postgres_role_url", "redis_acl_url"]  # fixtures used by name

SCHEMES = {"redis": ("/0", ""), "postgresql": ("/leases", ""),
           "mongodb": ("/leases", "serverSelectionTimeoutMS=300&connectTimeoutMS=300")}


#: Each leasectl run costs a Python start-up: every shape on one scheme, the
#: two that broke urlsplit on the others (connect()'s own tests cover all).
CASES = [("postgresql", shape) for shape in
         ("raw-userinfo", "encoded-userinfo", "query-encoded", "query-raw", "query-sslpassword")]
CASES += [(scheme, shape) for scheme in ("redis", "mongodb")
          for shape in ("raw-userinfo", "query-raw")]


def test_failing_urls_never_print_the_password(leasectl: Leasectl) -> None:
    for i, (scheme, shape) in enumerate(CASES):
        path, query = SCHEMES[scheme]
        url = url_shapes(scheme, f"127.0.0.1:{free_port()}", path, query)[shape]
        # Alternate the two ways a URL reaches leasectl.
        result = (leasectl("--url", url, "list") if i % 2 else
                  leasectl("show", "k", env={"LEASE_STORE_URL": url}))
        assert result.code in (exits.USAGE, exits.UNAVAILABLE), (scheme, shape, result)
        assert result.err.startswith("leasectl: "), (scheme, shape, result)
        assert_no_secret(result.out, result.err)


@pytest.mark.parametrize("server", ["redis", "postgres"])
def test_a_store_that_checks_the_password_is_shown_masked(
        server: str, request: pytest.FixtureRequest, key: str, leasectl: Leasectl) -> None:
    url: str = request.getfixturevalue("redis_acl_url" if server == "redis"
                                       else "postgres_role_url")
    with connect(url) as store, LeaseLock(store, key, ttl=30).hold():
        for result in (leasectl("--url", url, "list", key),
                       leasectl("--json", "history", key, env={"LEASE_STORE_URL": url})):
            assert result.code == 0, result
            assert ":***@127.0.0.1" in result.out
            assert_no_secret(result.out, result.err)
        # The same password pasted unencoded: refused with the fix, not echoed.
        raw = leasectl("--url", url.replace(ENCODED, PASSWORD), "list", key)
        assert raw.code == exits.USAGE and "percent-encode" in raw.err, raw
        assert_no_secret(raw.out, raw.err)


#: issue 24 item 2: URLs whose host-list errors quoted pieces of the password.
MULTI_HOST_URLS = [
    f"redis+sentinel://u:{PASSWORD}@s1:26379,s2:26379/leases",  # raw: refused with the fix
    "redis+cluster://:Kq9xvWzRm,127.0.0.1:{port}",                  # the '@' forgotten
    "rediss+sentinel://127.0.0.1:{port},s2:Kq9xvWzRm/leases",       # password where a port goes
    f"redis+cluster://u:{ENCODED}@127.0.0.1:{{port}},127.0.0.1:{{port}}?connect_timeout=1",
]


def test_multi_host_urls_never_print_the_password(leasectl: Leasectl) -> None:
    for i, url in enumerate(MULTI_HOST_URLS):
        url = url.replace("{port}", str(free_port()))
        args = ("--json", "list") if i % 2 else ("list",)
        result = (leasectl("--url", url, *args) if i < 2 else
                  leasectl(*args, env={"LEASE_STORE_URL": url}))
        assert result.code in (exits.USAGE, exits.UNAVAILABLE), (url, result)
        assert result.err.startswith("leasectl: "), (url, result)
        assert_no_secret(result.out, result.err)
        for piece in ("Kq9x", "q9xv", "9xvW", "xvWz", "vWzR", "WzRm"):
            assert piece not in result.out + result.err, (url, result)


def misplaced_urls() -> dict[str, list[str]]:
    """A URL with a password where leasectl takes none (issue 40, finding 2):
    argparse echoes the argument it cannot place in its own error."""
    raw = f"redis://leaseuser:{PASSWORD}@127.0.0.1:{free_port()}/0"
    encoded = raw.replace(PASSWORD, ENCODED)
    return {
        "misspelt flag": ["--ulr", encoded, "list"],
        "as the command": [encoded, "list"],
        "after list and its prefix": ["list", "k", encoded],
        "as show's key, then more": ["show", encoded, "k2"],
        "raw, as the command": [raw, "list"],
        "glued to an unknown flag": [f"--store={encoded}", "list"],
        "as a bad -n": ["history", "k", "-n", encoded],
        "as a bad --token": ["break", "k", "--token", encoded],
        "with --url too": ["--url", encoded, "show", encoded],
    }


@pytest.mark.parametrize("case", list(misplaced_urls()))
def test_a_url_anywhere_in_the_arguments_is_masked_in_every_message(
        case: str, leasectl: Leasectl) -> None:
    args = misplaced_urls()[case]
    result = leasectl(*args)
    assert result.code == exits.USAGE, (case, result)
    assert "***" in result.err, (case, result)
    assert_no_secret(result.out, result.err)


def test_a_url_given_as_lists_prefix_is_masked_on_stdout(leasectl: Leasectl, tmp_path: Path) -> None:
    """``leasectl list URL``: the URL is taken for a prefix, which the table's
    empty line and the JSON both echo (issue 40, finding 2)."""
    store_url = f"sqlite://{tmp_path}/leases.db"
    with connect(store_url) as store:
        store.list()  # makes the file
    url = f"redis://leaseuser:{ENCODED}@127.0.0.1:{free_port()}/0"
    for args in (["list", url], ["--json", "list", url]):
        result = leasectl("--url", store_url, *args)
        assert result.code == 0 and "***" in result.out, result
        assert_no_secret(result.out, result.err)


def test_in_process_main_masks_and_gives_stdout_back(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``main`` is also called in process (the demo, tests): the masking
    stdout it puts in place for a URL argument is taken away again."""
    from lease_integrations.cli import main

    store_url = f"sqlite://{tmp_path}/leases.db"
    with connect(store_url) as store:
        store.list()
    before = sys.stdout
    assert main(["--url", store_url, "list", f"redis://u:{ENCODED}@127.0.0.1:1/0"]) == 0
    assert sys.stdout is before
    shown = capsys.readouterr()
    assert "***" in shown.out
    assert_no_secret(shown.out, shown.err)

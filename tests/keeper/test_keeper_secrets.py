"""Contract 6 of issue 31: the lease's secret and the store's password reach
the keeper over a pipe, never in its argv or its environment (both readable
by any process of the user: ``ps e``, ``/proc/PID/environ``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from security.leaks import SPELLINGS, assert_no_secret
from security.secret_servers import postgres_role_url, redis_acl_url

from tests.keeper.keeper_runs import Run, figures

__all__ = ["postgres_role_url", "redis_acl_url"]  # fixtures, used by name


@pytest.mark.parametrize("fixture", ["redis_acl_url", "postgres_role_url"])
def test_the_keeper_has_no_secret_in_its_argv_or_environment(
        fixture: str, request: pytest.FixtureRequest, key: str,
        start_job: Callable[..., Run]) -> None:
    url: str = request.getfixturevalue(fixture)
    job = start_job(url, key, "--ttl", "2", "--sleep", "60", "--print-secret", "--wait-go")
    secret = job.lines()["secret"][0]
    keeper = job.go_once_kept(url, key)  # it has the secrets once it has renewed
    assert keeper is not None, "the job has no keeper"
    proc = Path(f"/proc/{keeper[0]}")
    texts = {name: (proc / name).read_bytes().replace(b"\0", b"\n").decode(errors="replace")
             for name in ("cmdline", "environ")}
    figures(test="secrets", store=url.split(":")[0], keeper_pid=keeper[0],
            cmdline=repr(texts["cmdline"].replace("\n", " ").strip()))
    for name, text in texts.items():
        assert secret not in text, f"the lease's secret is in the keeper's {name}"
        assert not [s for s in SPELLINGS if s in text], f"the password is in the keeper's {name}"
        assert_no_secret(text)


def test_a_store_url_in_the_jobs_environment_stays_out_of_the_keepers(
        redis_acl_url: str, key: str, start_job: Callable[..., Run],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 39: the job's environment holds ``LEASE_STORE_URL`` with its
    password (as ``connect()`` with no argument reads it); the keeper's
    environment block does not: what the store's driver needs reaches it on
    its stdin."""
    monkeypatch.setenv("LEASE_STORE_URL", redis_acl_url)
    monkeypatch.setenv("AIRFLOW_CONN_LEASE_DEFAULT", redis_acl_url)
    job = start_job(redis_acl_url, key, "--ttl", "2", "--sleep", "60", "--wait-go")
    keeper = job.go_once_kept(redis_acl_url, key)
    assert keeper is not None, "the job has no keeper"
    environ = Path(f"/proc/{keeper[0]}/environ").read_bytes().replace(b"\0", b"\n").decode(
        errors="replace")
    figures(test="secrets-env", keeper_pid=keeper[0],
            names=",".join(sorted(line.split("=", 1)[0] for line in environ.splitlines())))
    assert "LEASE_STORE_URL" not in environ and "AIRFLOW_CONN_" not in environ
    assert not [s for s in SPELLINGS if s in environ], "the password is in the keeper's environ"
    assert_no_secret(environ)

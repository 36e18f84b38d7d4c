"""URL-typo fuzz (issue 32, finding 3): every scheme, every way people
mistype a URL with a password in it (``url_typos``), each with a fresh
random password. No piece of it may show in ``mask_url``, in the error
``connect()`` or ``check_url()`` raises (message, repr, pickled copy,
traceback), whether the URL was given or came from ``$LEASE_STORE_URL``,
nor in what ``leasectl`` prints; and leasectl exits with a usage or
store error, never 5 (an internal error). Seeded: the seed is printed."""

from __future__ import annotations

import os
import pickle
import random
import traceback

import pytest
from cli.cli_helpers import run_leasectl
from servers.redis_server import free_port

from lease_integrations import LeaseError, check_url, connect
from lease_integrations.core import mask_url

from .url_typos import SCHEMES, SHAPE_NAMES, typos

#: leasectl runs a process per URL: a seeded sample of the typos, not all of them.
LEASECTL_SAMPLE = 12


def everything_said(exc: BaseException) -> list[str]:
    return [str(exc), repr(exc), repr(pickle.loads(pickle.dumps(exc))),
            "".join(traceback.format_exception(exc))]


def refusals(url: str, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What the library says about ``url``: given, and from the environment."""
    said = [mask_url(url)]
    for call in (lambda: check_url(url), lambda: connect(url).close()):
        try:
            call()
        except LeaseError as exc:
            said += everything_said(exc)
    with monkeypatch.context() as env:
        env.setenv("LEASE_STORE_URL", url)
        try:
            connect().close()
        except LeaseError as exc:
            said += everything_said(exc)
    return said


def test_no_typo_of_any_scheme_shows_its_password(monkeypatch: pytest.MonkeyPatch) -> None:
    seed = random.randrange(2**32)
    print(f"seed={seed}")
    rnd = random.Random(seed)
    made = typos(rnd, free_port)
    assert len(made) == len(SCHEMES) * len(SHAPE_NAMES)
    found = []
    for typo in made:
        said = refusals(typo.url, monkeypatch)
        if typo.leaks(*said):
            found.append((typo.name, typo.leaks(*said), next(t for t in said if typo.leaks(t))))
    assert not found, f"seed={seed}:\n" + "\n".join(map(repr, found))

    for typo in rnd.sample(made, LEASECTL_SAMPLE):
        given = run_leasectl("--url", typo.url, "list")
        from_env = run_leasectl("list", env={"LEASE_STORE_URL": typo.url})
        for result in (given, from_env):
            assert result.code in (2, 3), (seed, typo.name, result.code, result.err)
            assert not typo.leaks(result.out, result.err), (seed, typo.name, result.err)
    assert os.environ.get("LEASE_STORE_URL") is None

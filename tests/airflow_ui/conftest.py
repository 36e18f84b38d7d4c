"""One real api-server for the whole Leases page suite (starting Airflow is
the slow part), with the lease store it reads: a SQLite file, named to the
server through the ``lease_default`` Connection."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from api_server import ApiServer, poll, running

from lease_integrations import LEASE_LOST_EXIT_STATUS

#: The live holder the console's break test uses; the UI's break must do to it
#: exactly what ``leasectl break`` does.
HOLDER = Path(__file__).resolve().parents[1] / "cli" / "holder_process.py"


@pytest.fixture(scope="session")
def api_server() -> Iterator[ApiServer]:
    home = Path(tempfile.mkdtemp(prefix="lease-ui-airflow-"))
    server = ApiServer(home, home / "leases.db")
    with running(server):
        yield server


@pytest.fixture(scope="module")
def tokens(api_server: ApiServer) -> dict[str, str]:
    return {user: api_server.token(user) for user in ("admin", "viewer")}


@pytest.fixture
def http(api_server: ApiServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=api_server.base, timeout=30, follow_redirects=False) as client:
        yield client


def as_user(tokens: dict[str, str], user: str | None, *, cookie: bool = False) -> dict[str, str]:
    """Request headers: the UI's session cookie or a Bearer token (none: anonymous)."""
    if user is None:
        return {}
    if cookie:
        return {"Cookie": f"_token={tokens[user]}"}
    return {"Authorization": f"Bearer {tokens[user]}"}


@pytest.fixture
def key() -> str:
    return f"ui-{uuid.uuid4().hex[:10]}"


@dataclass
class Holder:
    """A live holder in another process (tests/cli/holder_process.py): it
    holds ``key`` under ``hold()`` (fail-stop) with meta dag_id=billing, run_id=live."""

    key: str
    token: int
    name: str
    out: Path
    proc: subprocess.Popen[bytes]

    def stopped(self) -> str | None:
        """The loss reason once fail-stop has ended the holder (exit 75), else None."""
        if self.proc.poll() != LEASE_LOST_EXIT_STATUS:
            return None
        return (self.out / "callback").read_text()


@pytest.fixture
def holder(api_server: ApiServer, key: str, tmp_path: Path) -> Iterator[Holder]:
    out = tmp_path / "holder"
    out.mkdir()
    proc = subprocess.Popen([sys.executable, str(HOLDER), api_server.store_url, key, str(out)])
    try:
        ready = poll(lambda: (out / "ready").exists() and (out / "ready").read_text(),
                     "the holder process to hold its lease", 60.0, 0.1)
        token, name = ready.split(" ", 1)
        yield Holder(key, int(token), name, out, proc)
    finally:
        if proc.poll() is None:
            proc.terminate()  # one still holding: SIGTERM gives its lease back
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)

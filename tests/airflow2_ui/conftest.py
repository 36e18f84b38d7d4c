"""One real Airflow 2.11 webserver for the Leases page suite (starting it is
the slow part), with the lease store it reads: a SQLite file, named to the
server through the ``lease_default`` Connection. The browser driver is the
Airflow 3 page suite's (``tests/airflow_ui/cdp.py``)."""

from __future__ import annotations

import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "airflow_ui"))

from api_server import running
from webserver2 import Webserver2

from lease_integrations import LeaseStore, connect

try:
    from airflow import __version__ as AIRFLOW_VERSION
except ImportError:  # no Airflow here: the whole directory is skipped below
    AIRFLOW_VERSION = "0"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if AIRFLOW_VERSION.split(".")[0] != "2":
        skip = pytest.mark.skip(
            reason=f"the Flask AppBuilder page is Airflow 2's (this is {AIRFLOW_VERSION})")
        for item in items:
            if Path(str(item.fspath)).parent == Path(__file__).parent:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def webserver() -> Iterator[Webserver2]:
    home = Path(tempfile.mkdtemp(prefix="lease-ui2-airflow-"))
    with running(Webserver2(home, home / "leases.db")) as server:
        yield server


@pytest.fixture
def store(webserver: Webserver2) -> Iterator[LeaseStore]:
    s = connect(webserver.store_url)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def key() -> str:
    return f"ui2-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def guarded(webserver: Webserver2) -> Iterator[LeaseStore]:
    """For one module, ``lease_default`` names a password-protected Redis
    (``guarded_redis.py``): the store the page then reads, opened for the
    test. The SQLite Connection comes back afterwards."""
    from guarded_redis import guarded_redis

    with guarded_redis() as (_, url):
        webserver.set_connection(url)
        webserver.guarded_url = url  # type: ignore[attr-defined]  # to point back to it
        store = connect(url)
        try:
            yield store
        finally:
            store.close()
            webserver.set_connection(webserver.store_uri)

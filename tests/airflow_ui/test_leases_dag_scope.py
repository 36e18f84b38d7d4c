"""What a DAG-restricted reader may learn through the Leases page on
Airflow 3 (issue 40), on a real api-server whose auth manager grants per DAG
(``per_dag_auth_manager.py``), with the page reading a password-protected
Redis store: every answer read here is checked for any piece of that
password (``guarded_redis.checked``).

User ``billing`` may read the page and DAG billing only; ``admin`` all."""

from __future__ import annotations

import html
import json
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from api_server import ApiServer, running
from guarded_redis import USER, checked, corrupt, guarded_redis

from lease_integrations import LeaseStore, connect

HERE = Path(__file__).resolve().parent
ROLES = {"admin": "ADMIN", "billing": "VIEWER"}
ACCESS = {"billing": {"dags": ["billing"], "leases_page": True}}
LEDGER = {"dag_id": "ledger", "run_id": "scheduled__secret-run", "task_id": "charge"}
BILLING = {"dag_id": "billing", "run_id": "manual__1", "task_id": "bill"}


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[ApiServer, LeaseStore]]:
    with guarded_redis() as (_, url):
        home = Path(tempfile.mkdtemp(prefix="lease-ui-dag-scope-"))
        api = ApiServer(home, home / "unused.db", users=ROLES,
                        auth_manager="per_dag_auth_manager.PerDagAuthManager",
                        python_path=(str(HERE),),
                        extra_env={"LEASE_TEST_DAG_ACCESS": json.dumps(ACCESS),
                                   "AIRFLOW_CONN_LEASE_DEFAULT": url})
        with running(api), connect(url) as store:
            yield api, store


@pytest.fixture(scope="module")
def clients(served: tuple[ApiServer, LeaseStore]) -> Iterator[dict[str, httpx.Client]]:
    server, _ = served
    made = {user: httpx.Client(base_url=server.base, timeout=30,
                               headers={"Authorization": f"Bearer {server.token(user)}"})
            for user in ROLES}
    yield made
    for client in made.values():
        client.close()


@pytest.fixture
def store(served: tuple[ApiServer, LeaseStore]) -> LeaseStore:
    return served[1]


@pytest.fixture
def key() -> str:
    return f"scope-{uuid.uuid4().hex[:10]}"


def grant_and_release(store: LeaseStore, key: str, meta: dict[str, str], rounds: int) -> list[int]:
    tokens = []
    for i in range(rounds):
        result = store.acquire(key, f"worker:{i}", f"secret-{i}", 600, meta)
        assert result.granted and result.record is not None
        tokens.append(result.record.token)
        assert store.release(key, f"secret-{i}", result.record.token)
    return tokens


def test_another_dags_history_is_hidden_whatever_the_window(
        clients: dict[str, httpx.Client], store: LeaseStore, key: str) -> None:
    """Finding 1: a ``lost`` event carries no meta; once the grant it
    belongs to was trimmed (the store keeps 100 events), nothing in the key's
    history places it. It must not be served as an event of no DAG."""
    tokens = grant_and_release(store, key, LEDGER, 50)
    assert store.acquire(key, "worker:held", "secret-held", 600, LEDGER).granted
    store.record_event(key, "lost", "worker:0", tokens[0], {"reason": "renewal refused"})
    assert store.history(key, 100)[0].token != tokens[0]
    reader = clients["billing"]
    for limit in ("1", "2", "3", "100", "1000"):
        answer = checked(reader.get("/leases/api/history", params={"key": key, "limit": limit}))
        assert answer.status_code == 404, (limit, answer.text[:500])
    page = checked(reader.get("/leases/history", params={"key": key}))
    assert page.status_code == 404 and "secret-run" not in page.text, page.text[-1500:]
    shown = checked(clients["admin"].get("/leases/api/history", params={"key": key, "limit": "1"}))
    assert [(e["kind"], e["token"]) for e in shown.json()["events"]] == [("lost", tokens[0])]


def test_limit_counts_the_events_the_reader_may_read(
        clients: dict[str, httpx.Client], store: LeaseStore, key: str) -> None:
    """Finding 1: ``limit`` applies after the filter."""
    billing = grant_and_release(store, key, BILLING, 1)
    grant_and_release(store, key, LEDGER, 2)
    reader = clients["billing"]
    answer = checked(reader.get("/leases/api/history", params={"key": key, "limit": "2"}))
    assert answer.status_code == 200, answer.text[:500]
    assert [(e["kind"], e["token"]) for e in answer.json()["events"]] == [
        ("acquired", billing[0]), ("released", billing[0])]
    page = checked(reader.get("/leases/history", params={"key": key}))
    assert page.status_code == 200 and "secret-run" not in html.unescape(page.text)


def test_a_corrupt_record_is_named_only_to_those_who_may_read_every_dag(
        clients: dict[str, httpx.Client], store: LeaseStore, key: str) -> None:
    """Finding 4: an unparsable record answered 503 quoting the bad field to
    any reader; its DAG cannot be told."""
    assert store.acquire(key, "worker:1", "s1", 600, LEDGER).granted
    corrupt(store, key)
    reader = clients["billing"]
    for path in ("/leases/api/lease", "/leases/history", "/leases/api/history"):
        answer = checked(reader.get(path, params={"key": key}))
        assert answer.status_code == 404, (path, answer.text[:500])
        assert "ledger-garbage" not in answer.text and "expires_at" not in answer.text
    listing = checked(reader.get("/leases/api/leases", params={"prefix": key}))
    assert listing.json()["unreadable"] == [] and key not in listing.text
    admin = clients["admin"]
    assert "expires_at" in checked(admin.get("/leases/api/lease", params={"key": key})).text
    shown = checked(admin.get("/leases/api/leases", params={"prefix": key})).json()
    assert len(shown["unreadable"]) == 1 and key in shown["unreadable"][0]
    page = checked(admin.get("/leases/", params={"prefix": key}))
    assert "could not be read" in page.text and key in page.text


def test_the_store_location_is_shown_only_to_those_who_may_read_every_dag(
        clients: dict[str, httpx.Client], store: LeaseStore, key: str) -> None:
    """Finding 8: host, port and user name of the store, for admins only."""
    assert store.acquire(key, "worker:1", "s1", 600, BILLING).granted
    port = store.url.rsplit(":", 1)[1].split("/")[0]
    reader = clients["billing"]
    answers = [checked(reader.get(path, params={"prefix": key}))
               for path in ("/leases/", "/leases/api/leases")]
    answers += [checked(reader.get("/leases/history", params={"key": key})),
                checked(reader.get("/leases/dag", params={"dag_id": "billing"}))]
    for answer in answers:
        assert answer.status_code == 200
        assert USER not in answer.text and port not in answer.text, answer.text[-1500:]
    listing = checked(clients["admin"].get("/leases/api/leases", params={"prefix": key})).json()
    assert listing["store"] == f"redis://{USER}:***@127.0.0.1:{port}/0"

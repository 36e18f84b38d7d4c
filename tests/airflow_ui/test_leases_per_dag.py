"""Authorization beyond "signed in" (issue 24, item 7), on a real api-server
whose auth manager has per-DAG permissions (``per_dag_auth_manager.py``).

The rule: a lease whose meta names a ``dag_id`` is shown only to users the
auth manager lets read that DAG (``is_authorized_dag``); a lease that names
no DAG (a Prefect flow's, a script's) needs only what the page needs
(``GET`` on the custom view ``Leases``). The DAG tab needs read on its DAG.
A key's record, and each of its events, needs read on the DAG it names
(another DAG's key answers 404, as a missing key does), and a break needs
that as well as the break permission."""

from __future__ import annotations

import json
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from api_server import ApiServer, running

from lease_integrations import LeaseStore, connect

HERE = Path(__file__).resolve().parent
ROLES = {"admin": "ADMIN", "billing": "VIEWER", "nopage": "VIEWER", "billing_admin": "ADMIN"}
ACCESS = {"billing": {"dags": ["billing"], "leases_page": True},
          "nopage": {"dags": ["billing"], "leases_page": False},
          "billing_admin": {"dags": ["billing"], "leases_page": True}}


@pytest.fixture(scope="module")
def server() -> Iterator[ApiServer]:
    home = Path(tempfile.mkdtemp(prefix="lease-ui-per-dag-"))
    api = ApiServer(home, home / "leases.db", users=ROLES,
                    auth_manager="per_dag_auth_manager.PerDagAuthManager", python_path=(str(HERE),),
                    extra_env={"LEASE_TEST_DAG_ACCESS": json.dumps(ACCESS)})
    with running(api):
        yield api


@pytest.fixture(scope="module")
def clients(server: ApiServer) -> Iterator[dict[str, httpx.Client]]:
    made = {user: httpx.Client(base_url=server.base, timeout=30,
                               headers={"Authorization": f"Bearer {server.token(user)}"})
            for user in ROLES}
    yield made
    for client in made.values():
        client.close()


@pytest.fixture
def keys(server: ApiServer) -> Iterator[dict[str, str]]:
    """Three held leases: one of DAG billing, one of DAG reports, one of a
    Prefect flow (no dag_id)."""
    tag = uuid.uuid4().hex[:8]
    made = {"billing": f"b-{tag}", "reports": f"r-{tag}", "flow": f"f-{tag}"}
    metas = {"billing": {"dag_id": "billing", "run_id": "r1", "host": "w1"},
             "reports": {"dag_id": "reports", "run_id": "secret-run", "host": "team-b-host"},
             "flow": {"flow_run_id": "0f0f", "host": "w3"}}
    with connect(server.store_url) as store:
        for name, key in made.items():
            assert store.acquire(key, f"{name}-holder", f"{name}-secret", 300, metas[name]).granted
        yield made


def listed(client: httpx.Client, prefix: str = "") -> set[str]:
    response = client.get(f"/leases/api/leases?prefix={prefix}")
    assert response.status_code == 200, response.text
    return {r["key"] for r in response.json()["leases"]}


def test_rows_of_a_dag_show_only_to_users_who_may_read_it(
        clients: dict[str, httpx.Client], keys: dict[str, str]) -> None:
    ours = set(keys.values())
    assert listed(clients["admin"]) >= ours
    assert listed(clients["billing"]) & ours == {keys["billing"], keys["flow"]}
    page = clients["billing"].get("/leases/")
    assert page.status_code == 200 and keys["billing"] in page.text and keys["flow"] in page.text
    assert keys["reports"] not in page.text and "team-b-host" not in page.text

    for path in (f"/leases/api/lease?key={keys['reports']}", f"/leases/api/history?key={keys['reports']}",
                 f"/leases/history?key={keys['reports']}"):
        denied = clients["billing"].get(path)  # as for a missing key (issue 32, finding 8)
        assert denied.status_code == 404, (path, denied.text)
        assert "secret-run" not in denied.text and "team-b-host" not in denied.text
    for key in (keys["billing"], keys["flow"]):
        assert clients["billing"].get(f"/leases/api/lease?key={key}").status_code == 200
        assert clients["billing"].get(f"/leases/api/history?key={key}").status_code == 200


def test_the_dag_tab_asks_the_auth_manager_about_its_dag(
        clients: dict[str, httpx.Client], keys: dict[str, str]) -> None:
    billing = clients["billing"]
    for path in ("/leases/api/dag?dag_id=reports", "/leases/dag?dag_id=reports"):
        denied = billing.get(path)
        assert denied.status_code == 403 and keys["reports"] not in denied.text, (path, denied.text)
    mine = billing.get("/leases/api/dag?dag_id=billing")
    shown = {r["key"] for r in mine.json()["leases"]}  # (earlier tests' billing leases too)
    assert mine.status_code == 200 and keys["billing"] in shown
    assert not shown & {keys["reports"], keys["flow"]}
    assert keys["reports"] in clients["admin"].get("/leases/dag?dag_id=reports").text
    # The DAG tab needs read on its DAG only, not the Leases page itself.
    nopage = clients["nopage"]
    assert nopage.get("/leases/").status_code == 403
    assert nopage.get("/leases/api/leases").status_code == 403
    assert keys["billing"] in nopage.get("/leases/dag?dag_id=billing").text


def test_a_break_needs_read_on_the_dag_of_the_lease(
        server: ApiServer, clients: dict[str, httpx.Client], keys: dict[str, str]) -> None:
    admin = clients["billing_admin"]
    refused = [admin.get(f"/leases/break?key={keys['reports']}"),
               admin.post(f"/leases/api/break?key={keys['reports']}",
                          headers={"X-Lease-Break": keys["reports"]})]
    assert [r.status_code for r in refused] == [404, 404], [r.text for r in refused]
    with connect(server.store_url) as store:
        assert _holder(store, keys["reports"]) == "reports-holder"
    broke = admin.post(f"/leases/api/break?key={keys['billing']}", headers={"X-Lease-Break": keys["billing"]})
    assert broke.status_code == 200 and broke.json()["broken"] is True, broke.text
    with connect(server.store_url) as store:
        assert _holder(store, keys["billing"]) is None


def _holder(store: LeaseStore, key: str) -> str | None:
    record = store.get(key)
    return None if record is None else record.holder

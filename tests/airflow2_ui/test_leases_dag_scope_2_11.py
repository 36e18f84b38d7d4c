"""What a DAG-restricted reader may learn through the Leases page on Airflow
2.11 (issue 40), behind its real webserver and FAB's login, with the page
reading a password-protected Redis store: every answer read here is checked
for any piece of that password (``guarded_redis.checked``).

Users (``webserver2.py``): admin (Admin), reader (page + DAGs billing and
dag_a), breaker (page, delete, the same DAGs), viewer (Airflow's Viewer: no
Leases). DAG ``ledger`` is one the reader may not read."""

from __future__ import annotations

import html
import re

import pytest
from api_server import free_port
from guarded_redis import USER, checked, corrupt
from security.leaks import ENCODED
from webserver2 import Webserver2

from lease_integrations import LeaseStore

LEDGER = {"dag_id": "ledger", "run_id": "scheduled__secret-run", "task_id": "charge"}
BILLING = {"dag_id": "billing", "run_id": "manual__1", "task_id": "bill"}


def grant_and_release(store: LeaseStore, key: str, meta: dict[str, str], rounds: int) -> list[int]:
    tokens = []
    for i in range(rounds):
        result = store.acquire(key, f"worker:{i}", f"secret-{i}", 600, meta)
        assert result.granted and result.record is not None
        tokens.append(result.record.token)
        assert store.release(key, f"secret-{i}", result.record.token)
    return tokens


def test_another_dags_history_is_hidden_whatever_the_window(
        webserver: Webserver2, guarded: LeaseStore, key: str) -> None:
    """Finding 1: a ``lost`` event carries no meta; once the grant it
    belongs to was trimmed (the store keeps 100 events), nothing in the key's
    history places it. It must not be served as an event of no DAG: not in
    the JSON with a small ``limit``, not on the page with none."""
    tokens = grant_and_release(guarded, key, LEDGER, 50)
    held = guarded.acquire(key, "worker:held", "secret-held", 600, LEDGER)
    assert held.granted
    guarded.record_event(key, "lost", "worker:0", tokens[0], {"reason": "renewal refused"})
    assert len(guarded.history(key, 100)) == 100 and guarded.history(key, 100)[0].token != tokens[0]
    with webserver.session("reader") as reader:
        for limit in ("1", "2", "3", "100", "1000"):
            answer = checked(reader.get("/leases/api/history", params={"key": key, "limit": limit}))
            assert answer.status_code == 404, (limit, answer.text[:500])
        page = checked(reader.get("/leases/history", params={"key": key}))
        assert page.status_code == 404 and "secret-run" not in page.text, page.text[-1500:]
    with webserver.session("admin") as admin:
        shown = checked(admin.get("/leases/api/history", params={"key": key, "limit": "1"})).json()
        assert [(e["kind"], e["token"]) for e in shown["events"]] == [("lost", tokens[0])]


def test_limit_counts_the_events_the_reader_may_read(
        webserver: Webserver2, guarded: LeaseStore, key: str) -> None:
    """Finding 1: ``limit`` applies after the filter. A key that DAG billing
    used, then DAG ledger: the reader's newest two events are billing's."""
    billing = grant_and_release(guarded, key, BILLING, 1)
    grant_and_release(guarded, key, LEDGER, 2)
    with webserver.session("reader") as reader:
        answer = checked(reader.get("/leases/api/history", params={"key": key, "limit": "2"}))
        assert answer.status_code == 200, answer.text[:500]
        assert [(e["kind"], e["token"]) for e in answer.json()["events"]] == [
            ("acquired", billing[0]), ("released", billing[0])]
        page = checked(reader.get("/leases/history", params={"key": key}))
        assert page.status_code == 200 and "secret-run" not in html.unescape(page.text)


def test_a_corrupt_record_is_named_only_to_those_who_may_read_every_dag(
        webserver: Webserver2, guarded: LeaseStore, key: str) -> None:
    """Finding 4: an unparsable record answered 503 quoting the bad field to
    any reader. Its DAG cannot be told, so a reader of some DAGs gets the
    missing key's 404 and nothing of the field; an admin sees it named, in
    the list too."""
    assert guarded.acquire(key, "worker:1", "s1", 600, LEDGER).granted
    corrupt(guarded, key)
    with webserver.session("reader") as reader:
        for path in ("/leases/api/lease", "/leases/history", "/leases/api/history"):
            answer = checked(reader.get(path, params={"key": key}))
            assert answer.status_code == 404, (path, answer.text[:500])
            assert "ledger-garbage" not in answer.text and "expires_at" not in answer.text
        listing = checked(reader.get("/leases/api/leases", params={"prefix": key}))
        assert listing.json()["unreadable"] == [] and key not in listing.text
    with webserver.session("admin") as admin:
        answer = checked(admin.get("/leases/api/lease", params={"key": key}))
        assert answer.status_code == 503 and "expires_at" in answer.text
        listing = checked(admin.get("/leases/api/leases", params={"prefix": key})).json()
        assert len(listing["unreadable"]) == 1 and key in listing["unreadable"][0]
        page = checked(admin.get("/leases/", params={"prefix": key}))
        assert "could not be read" in page.text and key in page.text


def test_the_dag_route_needs_the_leases_permission_on_2_11(
        webserver: Webserver2, guarded: LeaseStore, key: str) -> None:
    """Finding 5: 2.11 has no DAG tab; ``/leases/dag`` is another way into the
    page and needs its permission. A Viewer (read on every DAG, no Leases)."""
    assert guarded.acquire(key, "worker:1", "s1", 600, BILLING).granted
    with webserver.session("viewer") as viewer:
        for path in ("/leases/dag", "/leases/api/dag"):
            answer = checked(viewer.get(path, params={"dag_id": "billing"}))
            assert answer.status_code == 403 and key not in answer.text, (path, answer.text[:300])
    with webserver.session("reader") as reader:
        answer = checked(reader.get("/leases/api/dag", params={"dag_id": "billing"}))
        assert answer.status_code == 200 and key in answer.text


def test_the_refusal_names_only_what_2_11_honours(
        webserver: Webserver2, guarded: LeaseStore, key: str) -> None:
    """Finding 6: 2.11 ignores the ``X-Lease-Break`` header, so its refusal
    must not tell the user to send it."""
    held = guarded.acquire(key, "worker:1", "s1", 600, BILLING)
    assert held.granted and held.record is not None
    with webserver.session("breaker") as breaker:
        page = breaker.get("/leases/break", params={"key": key}).text
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', page)
        assert csrf, page[-2000:]
        answer = checked(breaker.post("/leases/break", headers={"X-Lease-Break": key}, data={
            "key": key, "token": str(held.record.token), "confirm": "", "csrf_token": csrf.group(1)}))
    assert answer.status_code == 403, answer.text[-1000:]
    assert "X-Lease-Break" not in answer.text and "confirmation token" in answer.text
    assert guarded.get(key).holder == "worker:1"  # type: ignore[union-attr]


def test_the_store_location_is_shown_only_to_those_who_may_read_every_dag(
        webserver: Webserver2, guarded: LeaseStore, key: str) -> None:
    """Finding 8: host, port and user name of the store, for admins only."""
    assert guarded.acquire(key, "worker:1", "s1", 600, BILLING).granted
    port = guarded.url.rsplit(":", 1)[1].split("/")[0]
    with webserver.session("reader") as reader:
        answers = [checked(reader.get(path, params={"prefix": key}))
                   for path in ("/leases/", "/leases/api/leases")]
        answers.append(checked(reader.get("/leases/history", params={"key": key})))
        for answer in answers:
            assert answer.status_code == 200
            assert USER not in answer.text and port not in answer.text, answer.text[-1500:]
            assert "redis" in answer.text
    with webserver.session("admin") as admin:
        listing = checked(admin.get("/leases/api/leases", params={"prefix": key})).json()
        assert listing["store"] == f"redis://{USER}:***@127.0.0.1:{port}/0"


@pytest.mark.parametrize(("method", "path", "data"), [
    ("POST", "/leases/break", {"key": "k", "token": "1"}),   # Flask-WTF's CSRF 400
    ("DELETE", "/leases/", None),                            # Flask's 405
    ("GET", "/leases/no-such-page", None),                   # a 404 below the prefix
])
def test_answers_airflow_makes_under_leases_carry_the_headers(
        webserver: Webserver2, guarded: LeaseStore, method: str, path: str,
        data: dict[str, str] | None) -> None:
    """Finding 7: the page's frame and sniffing headers also on the answers
    Airflow or Flask make before or instead of the view."""
    with webserver.session("admin") as admin:
        answer = checked(admin.request(method, path, data=data))
    assert answer.status_code in (400, 404, 405), answer.status_code
    assert "frame-ancestors 'self'" in answer.headers.get("content-security-policy", "")
    assert answer.headers.get("x-frame-options") == "SAMEORIGIN"
    assert answer.headers.get("x-content-type-options") == "nosniff"
    with webserver.session(None) as anonymous:
        redirected = checked(anonymous.get("/leases/"))
    assert redirected.status_code == 302 and redirected.headers.get("x-frame-options") == "SAMEORIGIN"


def test_a_store_error_names_the_store_only_to_those_who_may_read_every_dag(
        webserver: Webserver2, guarded: LeaseStore) -> None:
    """Finding 8, its errors: the 503 of a store that cannot be reached
    quotes its (masked) URL, host, port and user, to admins only."""
    port = str(free_port())
    webserver.set_connection(f"redis://{USER}:{ENCODED}@127.0.0.1:{port}/0")
    try:
        with webserver.session("reader") as reader:
            answer = checked(reader.get("/leases/api/leases"))
            assert answer.status_code == 503, answer.text[:500]
            assert port not in answer.text and USER not in answer.text, answer.text
        with webserver.session("admin") as admin:
            answer = checked(admin.get("/leases/api/leases"))
            assert answer.status_code == 503 and port in answer.text, answer.text
    finally:
        webserver.set_connection(webserver.guarded_url)  # type: ignore[attr-defined]

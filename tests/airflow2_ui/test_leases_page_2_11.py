"""The Leases page on Airflow 2.11, through its real webserver and FAB's
login: the same rules as on Airflow 3 (``tests/airflow_ui``). Reading needs
``can_read`` on Leases, and a row of a DAG also needs read on that DAG; a
break needs ``can_delete`` on Leases plus read on the lease's DAG, goes
through the confirm page (Flask-WTF's CSRF token and our confirm token both
required) and breaks exactly the token shown; every answer carries the frame
headers; what a holder writes into its meta reaches the page escaped.

Users (``webserver2.py``): admin (Admin), reader (page + DAG billing),
breaker (page, delete, DAG billing), viewer (Airflow's Viewer: no Leases)."""

from __future__ import annotations

import html
import re
from contextlib import AbstractContextManager

import httpx
import pytest
from webserver2 import Webserver2

from lease_integrations import LeaseStore

HOSTILE = '<img src=x onerror="alert(1)">'


def take(store: LeaseStore, key: str, dag_id: str, **meta: object) -> int:
    """A live lease of ``dag_id`` taken through the store, as a task takes it."""
    result = store.acquire(key, f"worker-1:42:{key[-10:]}0000000000", "s3cret", 600,
                           {"dag_id": dag_id, "run_id": "live", "task_id": "t", **meta})
    assert result.granted and result.record is not None
    return result.record.token


def signed_in(webserver: Webserver2, user: str | None) -> AbstractContextManager[httpx.Client]:
    """A fresh client signed in as ``user`` through FAB's login form, closed after."""
    return webserver.session(user)


def confirm_form(page: str) -> dict[str, str]:
    fields = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', page))
    assert {"csrf_token", "key", "token", "confirm"} <= set(fields), page[-3000:]
    return fields


def test_anonymous_users_are_sent_to_the_login_page(webserver: Webserver2) -> None:
    with signed_in(webserver, None) as anonymous:
        page = anonymous.get("/leases/")
        assert page.status_code == 302 and "/login/" in page.headers["location"]
        assert anonymous.get("/leases/api/leases").status_code == 401


def test_the_page_is_under_browse_for_those_who_may_read_it(webserver: Webserver2) -> None:
    with signed_in(webserver, "reader") as reader:
        home = reader.get("/home", follow_redirects=True)
        assert 'href="/leases/"' in home.text, "no Browse -> Leases menu entry"
    with signed_in(webserver, "viewer") as viewer:
        assert viewer.get("/leases/").status_code == 403
        assert viewer.get("/leases/api/leases").status_code == 403


def test_a_reader_sees_only_the_rows_of_dags_it_may_read(
        webserver: Webserver2, store: LeaseStore, key: str) -> None:
    take(store, key + "-billing", "billing")
    take(store, key + "-ledger", "ledger")
    with signed_in(webserver, "admin") as admin:
        page = admin.get("/leases/", params={"prefix": key}).text
        assert key + "-billing" in page and key + "-ledger" in page
    with signed_in(webserver, "reader") as reader:
        page = reader.get("/leases/", params={"prefix": key})
        assert page.status_code == 200
        assert key + "-billing" in page.text and key + "-ledger" not in page.text
        assert "Break…" not in page.text and "breaking a lease needs more rights" in page.text
        listed = reader.get("/leases/api/leases", params={"prefix": key}).json()
        assert [r["key"] for r in listed["leases"]] == [key + "-billing"]
        # Another DAG's key answers as a missing one does, page and JSON alike.
        for path in ("/leases/history", "/leases/api/lease", "/leases/api/history"):
            assert reader.get(path, params={"key": key + "-ledger"}).status_code == 404, path
            assert reader.get(path, params={"key": key + "-billing"}).status_code == 200, path
        assert reader.get("/leases/dag", params={"dag_id": "ledger"}).status_code == 403
        assert key + "-billing" in reader.get("/leases/dag", params={"dag_id": "billing"}).text


def test_a_break_goes_through_the_confirm_page_and_breaks_the_token_shown(
        webserver: Webserver2, store: LeaseStore, key: str) -> None:
    token = take(store, key, "billing")
    with signed_in(webserver, "breaker") as breaker:
        listing = breaker.get("/leases/", params={"prefix": key}).text
        assert f'href="break?key={key}"' in listing
        confirm = breaker.get("/leases/break", params={"key": key})
        assert confirm.status_code == 200 and f"Break token {token} now" in confirm.text
        fields = confirm_form(confirm.text)
        assert fields["token"] == str(token)

        # Without Flask-WTF's token (a cross-site form): refused, nothing broken.
        no_csrf = {k: v for k, v in fields.items() if k != "csrf_token"}
        assert breaker.post("/leases/break", data=no_csrf).status_code == 400
        # Without our confirm token: refused too.
        assert breaker.post("/leases/break", data={**fields, "confirm": ""}).status_code == 403
        # A token other than the one the page showed: its confirm token does not match: 403.
        assert breaker.post("/leases/break", data={**fields, "token": str(token + 1)}).status_code == 403
        record = store.get(key)
        assert record is not None and record.state == "held" and record.token == token

        done = breaker.post("/leases/break", data=fields)
        assert done.status_code == 200, done.text[-2000:]
        assert f"token {token}" in done.text and "recorded as broken by" in done.text
    record = store.get(key)
    assert record is not None and record.holder is None
    broke = [e for e in store.history(key) if e.kind == "broken"]
    assert [(e.token, e.holder) for e in broke] == [(token, "worker-1:42:" + key[-10:] + "0000000000")]
    assert "breaker" in str(broke[0].detail)


def test_a_changed_token_is_not_broken(webserver: Webserver2, store: LeaseStore, key: str) -> None:
    """The confirm page showed token N; the key changed hands before the
    post: the break answers 409 and the new holder keeps its lease."""
    first = take(store, key, "billing")
    with signed_in(webserver, "breaker") as breaker:
        fields = confirm_form(breaker.get("/leases/break", params={"key": key}).text)
        assert store.force_release(key, "test", token=first) is not None
        second = take(store, key, "billing")
        answer = breaker.post("/leases/break", data=fields)
        assert answer.status_code == 409, answer.text[-2000:]
    record = store.get(key)
    assert record is not None and record.token == second and record.holder is not None


def test_breaking_needs_delete_and_read_on_the_leases_dag(
        webserver: Webserver2, store: LeaseStore, key: str) -> None:
    take(store, key + "-billing", "billing")
    take(store, key + "-ledger", "ledger")
    with signed_in(webserver, "reader") as reader:
        assert reader.get("/leases/break", params={"key": key + "-billing"}).status_code == 403
    with signed_in(webserver, "breaker") as breaker:
        # The breaker may not read DAG ledger: its key is not there for it.
        assert breaker.get("/leases/break", params={"key": key + "-ledger"}).status_code == 404
    ledger = store.get(key + "-ledger")
    assert ledger is not None and ledger.holder is not None


def test_what_a_holder_writes_reaches_the_page_escaped(
        webserver: Webserver2, store: LeaseStore, key: str) -> None:
    take(store, key, HOSTILE, note=HOSTILE)
    with signed_in(webserver, "admin") as admin:
        for page in (admin.get("/leases/", params={"prefix": key}),
                     admin.get("/leases/history", params={"key": key})):
            assert page.status_code == 200
            assert HOSTILE not in page.text and "<img src=x" not in page.text
            assert "&lt;img src=x onerror=&#34;alert(1)&#34;&gt;" in page.text


@pytest.mark.parametrize("path", ["/leases/", "/leases/api/leases", "/leases/history?key=none-such",
                                  "/leases/break?key=none-such"])
def test_every_answer_carries_the_frame_headers(webserver: Webserver2, path: str) -> None:
    with signed_in(webserver, "admin") as admin:
        answer = admin.get(path)
    assert answer.status_code in (200, 404)
    assert "frame-ancestors 'self'" in answer.headers["content-security-policy"]
    assert answer.headers["x-frame-options"] == "SAMEORIGIN"
    assert answer.headers["x-content-type-options"] == "nosniff"


@pytest.mark.parametrize(("path", "named"), [
    ("/leases/history", "'key'"), ("/leases/api/lease", "'key'"), ("/leases/dag", "'dag_id'"),
    ("/leases/api/history?key=k&limit=abc", "'limit'"), ("/leases/api/history?key=k&limit=0", "'limit'"),
])
def test_a_bad_parameter_is_named_in_a_400(webserver: Webserver2, path: str, named: str) -> None:
    with signed_in(webserver, "admin") as admin:
        answer = admin.get(path)
    assert answer.status_code == 400, answer.text[-1000:]
    assert named in html.unescape(answer.text)


def test_a_break_without_a_whole_token_breaks_nothing(
        webserver: Webserver2, store: LeaseStore, key: str) -> None:
    token = take(store, key, "billing")
    with signed_in(webserver, "admin") as admin:
        fields = confirm_form(admin.get("/leases/break", params={"key": key}).text)
        answer = admin.post("/leases/break", data={**fields, "token": "7; drop"})
    assert answer.status_code == 400 and "'token'" in html.unescape(answer.text)
    record = store.get(key)
    assert record is not None and record.token == token and record.holder is not None

"""What a DAG-restricted reader may learn through the Leases page on Airflow
2.11 (issue 40), behind its real webserver and FAB's login, with the page
reading a password-protected Redis store: every answer read here is checked
for any piece of that password (``guarded_redis.checked``).

Users (``webserver2.py``): admin (Admin), reader (page + DAGs billing and
dag_a), breaker (page, delete, the same DAGs), viewer (Airflow's Viewer: no
Leases). DAG ``ledger`` is one the reader may not read."""

from __future__ import annotations

import html

from guarded_redis import checked
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

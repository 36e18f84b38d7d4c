"""Issue 32 on a real api-server with per-DAG permissions
(``per_dag_auth_manager.py``) whose store is switched per test
(``switchable_store.py``), so one server covers every shared store.

- Finding 1: a user who may break only ``dag_a``'s leases aims breaks at a
  key that ``dag_b`` takes the moment ``dag_a`` releases it (naming the
  *next* token, and naming none), and at fresh keys ``dag_b`` is about to
  take for the first time. The break used to check the record it read and
  then break on the caller's token (or on none at all when there was no
  record). Nothing of ``dag_b``'s may be broken, nor shown.
- Finding 2: history was checked on one read and served from a second.
- Finding 8: a missing key and another DAG's key answer alike (404); a break
  needs the page's permission too; events of a DAG run's holder
  (``dagrun:<dag_id>:<run_id>``) stay hidden once the ``acquired`` event
  that named the DAG in its meta is gone.
- Finding 5: hand-written events do not make the history a 500.
- Finding 6: a 500 carries the frame headers; every response ``nosniff``;
  the one script runs under a ``script-src`` hash.
- Finding 3: the 503 of every URL typo (``security/url_typos.py``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import re
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from api_server import ApiServer, free_port, poll, running
from security.url_typos import typos

from lease_integrations import connect

HERE = Path(__file__).resolve().parent
TAKERS = HERE / "dag_takers.py"
ROLES = {"admin": "ADMIN", "a_admin": "ADMIN", "a_viewer": "VIEWER", "nopage_admin": "ADMIN",
         "failing": "VIEWER"}
ACCESS = {"a_admin": {"dags": ["dag_a"], "leases_page": True},
          "a_viewer": {"dags": ["dag_a"], "leases_page": True},
          "nopage_admin": {"dags": ["dag_a"], "leases_page": False},
          "failing": {"dags": [], "leases_page": True, "fail": True}}
#: Seconds each race runs: the old check-then-break broke dag_b's lease
#: within a few seconds on every store on this machine.
RACE_SECONDS = 8.0
SHARED_STORES = ("sqlite", "redis", "postgres", "mongo")
#: Histories read while dag_b takes keys for the first time: the old second
#: read served dag_b's event in a few dozen on this machine.
HISTORIES = 60


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[ApiServer, Path]]:
    home = Path(tempfile.mkdtemp(prefix="lease-ui-races-"))
    case_file = home / "store-case.json"
    case_file.write_text(json.dumps({"url": f"sqlite://{home}/leases.db"}))
    api = ApiServer(home, home / "leases.db", users=ROLES, python_path=(str(HERE),),
                    auth_manager="per_dag_auth_manager.PerDagAuthManager", extra_env={
                        "LEASE_TEST_DAG_ACCESS": json.dumps(ACCESS),
                        "AIRFLOW__SECRETS__BACKEND": "switchable_store.SwitchableStoreBackend",
                        "AIRFLOW__SECRETS__BACKEND_KWARGS": json.dumps({"path": str(case_file)})})
    del api.env["AIRFLOW_CONN_LEASE_DEFAULT"]  # the switchable backend names the store
    with running(api):
        yield api, case_file


@pytest.fixture(scope="module")
def clients(server: tuple[ApiServer, Path]) -> Iterator[dict[str, httpx.Client]]:
    api, _ = server
    made = {user: httpx.Client(base_url=api.base, timeout=60,
                               headers={"Authorization": f"Bearer {api.token(user)}"})
            for user in ROLES}
    yield made
    for client in made.values():
        client.close()


def store_url(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if kind == "sqlite":
        return f"sqlite://{tmp_path}/leases.db?timeout=60"
    return str(request.getfixturevalue(f"{kind}_url"))


@pytest.fixture
def url_served(server: tuple[ApiServer, Path], request: pytest.FixtureRequest,
               tmp_path: Path) -> Callable[[str], str]:
    """Point the api-server at a store of the given kind; returns its URL."""
    def serve(kind: str) -> str:
        url = store_url(kind, request, tmp_path)
        server[1].write_text(json.dumps({"url": url}))
        return url
    return serve


class Takers:
    """dag_takers.py processes, stopped (and checked) at the end."""

    def __init__(self, url: str, tmp: Path) -> None:
        self.url, self.tmp, self.stop = url, tmp, tmp / "stop"
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, mode: str, key: str) -> Path:
        out = self.tmp / f"{mode}-{key}.jsonl"
        self.procs.append(subprocess.Popen(
            [sys.executable, str(TAKERS), mode, self.url, key, str(out), str(self.stop)]))
        return out

    def finish(self) -> None:
        self.stop.touch()
        assert [p.wait(timeout=120) for p in self.procs] == [0] * len(self.procs)


def take(url: str, key: str, holder: str, meta: dict[str, Any]) -> None:
    with connect(url) as store:
        assert store.acquire(key, holder, "secret", 300, meta).granted


def holder_of(url: str, key: str) -> str | None:
    with connect(url) as store:
        record = store.get(key)
        return None if record is None else record.holder


def grants(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []


def aiming(next_file: Path) -> str | None:
    try:
        return next_file.read_text() or None
    except FileNotFoundError:
        return None


@pytest.mark.parametrize("kind", SHARED_STORES)
def test_a_dag_restricted_admin_breaks_and_learns_nothing_of_another_dag(
        kind: str, url_served: Callable[[str], str], clients: dict[str, httpx.Client],
        tmp_path: Path) -> None:
    url = url_served(kind)
    shared, fresh = f"shared-{kind}-{tmp_path.name}", f"fresh-{kind}-{tmp_path.name}"
    takers = Takers(url, tmp_path)
    shared_out, fresh_out = takers.start("shared", shared), takers.start("fresh", fresh)
    # The race's seconds count from when both takers are taking: on a loaded
    # machine their start (an interpreter, a store client) took longer than the race.
    poll(lambda: grants(shared_out) and grants(fresh_out), "the takers' first grants", 120)
    answers: list[tuple[str, int, str]] = []
    lock = threading.Lock()

    def attack(aim: Callable[[httpx.Client], list[tuple[str, str]]]) -> None:
        with httpx.Client(base_url=clients["a_admin"].base_url,
                          headers=clients["a_admin"].headers, timeout=60) as http:
            deadline = time.monotonic() + RACE_SECONDS
            while time.monotonic() < deadline:
                for key, query in aim(http):
                    r = http.post(f"/leases/api/break?key={key}{query}",
                                  headers={"X-Lease-Break": key})
                    with lock:
                        answers.append((key, r.status_code, r.text))

    def next_token(http: httpx.Client) -> list[tuple[str, str]]:
        seen = http.get(f"/leases/api/lease?key={shared}")
        if seen.status_code != 200 or seen.json()["holder"] is None:
            return [(shared, "")]
        return [(shared, f"&token={seen.json()['token'] + 1}"), (shared, "")]

    def fresh_key(http: httpx.Client) -> list[tuple[str, str]]:
        key = aiming(fresh_out.with_suffix(".next"))
        return [(key, ""), (key, "&token=1")] if key else []

    threads = [threading.Thread(target=attack, args=(aim,)) for aim in (next_token, fresh_key)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        takers.finish()

    taken = grants(shared_out) + grants(fresh_out)
    broken_b = [g for g in taken if g["dag"] == "dag_b" and not g["released"]]
    assert not broken_b, f"{len(broken_b)} of dag_b's leases were broken: {broken_b[:3]}"
    told = [(key, code, text) for key, code, text in answers if "dag_b" in text]
    assert not told, f"{len(told)} answers showed dag_b's record: {told[:2]}"
    assert {code for _, code, _ in answers} <= {200, 404, 409}, {c for _, c, _ in answers}
    # The race happened: many grants of both DAGs, fresh keys, and breaks of dag_a's leases.
    assert sum(g["dag"] == "dag_b" for g in taken) > 50 and len(grants(fresh_out)) > 20
    assert any(g["dag"] == "dag_a" and not g["released"] for g in taken)
    fresh_answers = {code for key, code, _ in answers if key.startswith(fresh)}
    assert fresh_answers == {404}, fresh_answers  # never "not held" vs "hidden": alike


@pytest.mark.parametrize("kind", SHARED_STORES)
def test_history_serves_exactly_what_it_checked(
        kind: str, url_served: Callable[[str], str], clients: dict[str, httpx.Client],
        tmp_path: Path) -> None:
    """Fresh keys that ``dag_a`` takes and then ``dag_b`` takes for the first
    time, while a ``dag_a``-only viewer reads their history."""
    url = url_served(kind)
    prefix = f"hist-{kind}-{tmp_path.name}"
    takers = Takers(url, tmp_path)
    out = takers.start("history", prefix)
    viewer, answers, read = clients["a_viewer"], [], 0
    try:
        deadline = time.monotonic() + 90  # a store slow to open (mongo) needs longer
        while read < HISTORIES and time.monotonic() < deadline:
            key = aiming(out.with_suffix(".next"))
            if key:
                answers.append(viewer.get(f"/leases/api/history?key={key}"))
                read += answers[-1].status_code == 200 and bool(answers[-1].json()["events"])
    finally:
        takers.finish()
    shown = [r.text for r in answers if "dag_b" in r.text]
    assert not shown, f"{len(shown)} of {len(answers)} histories showed dag_b: {shown[0]}"
    assert {r.status_code for r in answers} <= {200, 404}
    assert read >= HISTORIES, (read, len(answers))
    served = [r.json()["events"] for r in answers if r.status_code == 200]
    assert all(e["detail"].get("meta", {}).get("dag_id", "dag_a") == "dag_a"
               for events in served for e in events)


def test_another_dags_key_answers_as_a_missing_key_does(
        url_served: Callable[[str], str], clients: dict[str, httpx.Client], tmp_path: Path) -> None:
    url = url_served("sqlite")
    hidden, missing = f"b-{tmp_path.name}", f"never-{tmp_path.name}"
    take(url, hidden, "b-holder", {"dag_id": "dag_b"})
    for user, method, path in [("a_viewer", "GET", "/leases/api/lease?key={}"),
                               ("a_viewer", "GET", "/leases/api/history?key={}"),
                               ("a_viewer", "GET", "/leases/history?key={}"),
                               ("a_admin", "GET", "/leases/break?key={}"),
                               ("a_admin", "POST", "/leases/api/break?key={}")]:
        said = []
        for key in (hidden, missing):
            r = clients[user].request(method, path.format(key), headers={"X-Lease-Break": key})
            said.append((r.status_code, r.text.replace(key, "KEY")))
        assert said[0] == said[1] and said[0][0] == 404, (path, said)
    assert holder_of(url, hidden) == "b-holder"


def test_a_break_needs_the_leases_page_permission_too(
        url_served: Callable[[str], str], clients: dict[str, httpx.Client], tmp_path: Path) -> None:
    url = url_served("sqlite")
    key = f"a-{tmp_path.name}"
    take(url, key, "a-holder", {"dag_id": "dag_a"})
    nopage = clients["nopage_admin"]
    refused = [nopage.get(f"/leases/break?key={key}"),
               nopage.post(f"/leases/api/break?key={key}", headers={"X-Lease-Break": key})]
    assert [r.status_code for r in refused] == [403, 403], [r.text for r in refused]
    assert holder_of(url, key) == "a-holder"


def test_a_dag_runs_events_stay_hidden_after_its_acquired_event_is_trimmed(
        url_served: Callable[[str], str], clients: dict[str, httpx.Client], tmp_path: Path) -> None:
    url = url_served("sqlite")
    key = f"run-{tmp_path.name}"
    with connect(url) as store:
        run = store.acquire(key, "dagrun:dag_b:scheduled__1", "s1", 300,
                            {"dag_id": "dag_b", "run_id": "scheduled__1"}).record
        assert run is not None and store.release(key, "s1", run.token)
        assert store.acquire(key, "flow-holder", "s2", 300, {"flow_run_id": "0f0f"}).granted
    with sqlite3.connect(tmp_path / "leases.db") as db:  # as trimming would, one day
        db.execute("DELETE FROM lease_events WHERE key = ? AND kind = 'acquired' AND token = ?",
                   (key, run.token))
    shown = clients["a_viewer"].get(f"/leases/api/history?key={key}")
    assert shown.status_code == 200, shown.text
    assert "scheduled__1" not in shown.text and "dag_b" not in shown.text, shown.text
    assert [e["holder"] for e in shown.json()["events"]] == ["flow-holder"]
    assert "scheduled__1" in clients["admin"].get(f"/leases/api/history?key={key}").text


def test_hand_written_events_do_not_break_the_history(
        url_served: Callable[[str], str], clients: dict[str, httpx.Client], tmp_path: Path) -> None:
    url = url_served("sqlite")
    key = f"bad-{tmp_path.name}"
    take(url, key, "a-holder", {"dag_id": "dag_a"})
    with sqlite3.connect(tmp_path / "leases.db") as db:
        db.executemany("INSERT INTO lease_events (key, kind, token, holder, at, detail) "
                       "VALUES (?, 'released', 1, 'h', ?, ?)",
                       [(key, "yesterday", "{}"), (key, 0.0, "{not json"), (key, 0.0, '{"meta": 5}'),
                        (key, 0.0, '{"meta": {"x": NaN}}')])
    for user in ("admin", "a_viewer"):
        page = clients[user].get(f"/leases/history?key={key}")
        assert page.status_code == 200 and "could not be read" in page.text, page.text[:300]
        api = clients[user].get(f"/leases/api/history?key={key}")
        assert api.status_code == 200, api.text
        assert api.json()["unreadable_events"] == 3 and len(api.json()["events"]) == 2


def test_every_response_carries_the_security_headers_a_500_included(
        url_served: Callable[[str], str], clients: dict[str, httpx.Client]) -> None:
    url_served("sqlite")
    close = {"Connection": "close"}  # uvicorn drops the connection after an unhandled error
    failed = clients["failing"].get("/leases/api/leases", headers=close)
    assert failed.status_code == 500, failed.text
    responses = [failed, clients["failing"].get("/leases/", headers=close),
                 clients["admin"].get("/leases/"), clients["admin"].get("/leases/api/leases"),
                 clients["a_viewer"].get("/leases/api/lease?key=none"),
                 clients["a_viewer"].post("/leases/api/break?key=none")]
    for r in responses:
        policy = r.headers.get("content-security-policy", "")
        assert "frame-ancestors 'self'" in policy, (r.request.url, r.status_code, r.headers)
        assert r.headers.get("x-frame-options") == "SAMEORIGIN", (r.request.url, r.status_code)
        assert r.headers.get("x-content-type-options") == "nosniff", (r.request.url, r.status_code)
    page = responses[2]
    scripts = re.findall(r"<script>(.*?)</script>", page.text, re.S)
    assert len(scripts) == 1
    digest = base64.b64encode(hashlib.sha256(scripts[0].encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in page.headers["content-security-policy"]


def test_no_url_typo_shows_its_password_in_a_503(
        server: tuple[ApiServer, Path], clients: dict[str, httpx.Client]) -> None:
    api, case_file = server
    seed = random.randrange(2**32)
    print(f"seed={seed}")
    made = typos(random.Random(seed), free_port)
    found = []
    for typo in made:
        case_file.write_text(json.dumps({"url": typo.url}))
        for path in ("/leases/api/leases", "/leases/"):
            r = clients["admin"].get(path)
            said = r.text + "".join(f"\n{k}: {v}" for k, v in r.headers.items())
            assert r.status_code == 503, (seed, typo.name, path, r.status_code, r.text[:300])
            if typo.leaks(said):
                found.append((typo.name, path, typo.leaks(said), r.text[:300]))
    assert not found, f"seed={seed}:\n" + "\n".join(map(repr, found))
    log = api.log.read_text(errors="replace")
    assert not [t.name for t in made if t.leaks(log)], seed

"""The Leases pages never show a store password in an error (issue 24,
item 2): for every URL scheme that can carry one, well-formed but
unreachable, malformed, or from a Connection, each HTML page and JSON
endpoint that opens the store answers 503 and no piece of the password is in
the body or the headers, nor in the api-server's log.

The multi-host cases are the review's: ``redis+sentinel://u:Pq9x@:abcd/...``
made the host-list parser quote ``':abcd'`` and ``'u:Pq9x'``, and the JSON
endpoint served that text to a viewer in its 503.

One api-server serves every case: a test secrets backend
(``switchable_store.py``) re-reads the case before each request, as a
Connection or as ``$LEASE_STORE_URL``, the two ways the page finds its store.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import httpx
import pytest
from api_server import ApiServer, free_port, running
from security.leaks import PASSWORD, PIECES, pieces, url_shapes

HERE = Path(__file__).resolve().parent
#: Halves of a password without a character ``check_credentials`` refuses,
#: so malformed URLs take them past it, into the host-list and port parsers.
HALVES = ("Pq9xKw", "Zt7mRv")
WHOLE = "".join(HALVES)
FORBIDDEN = PIECES | {s for half in HALVES for s in pieces(half)} | pieces(WHOLE) | {
    quote(PASSWORD), quote_plus(PASSWORD), f"{HALVES[0]}%40%3A{HALVES[1]}"}

#: scheme -> (path, query) that fail fast against a closed port.
SCHEMES = {
    "redis": ("/0", ""),
    "rediss": ("/0", ""),
    "redis+cluster": ("", "connect_timeout=1"),
    "rediss+cluster": ("", "connect_timeout=1"),
    "redis+sentinel": ("/leases/0", "connect_timeout=1"),
    "rediss+sentinel": ("/leases/0", "connect_timeout=1"),
    "postgresql": ("/leases", "connect_timeout=2"),
    "mongodb": ("/leases", "serverSelectionTimeoutMS=300&connectTimeoutMS=300"),
}
MULTI_HOST = {"redis+cluster", "rediss+cluster", "redis+sentinel", "rediss+sentinel"}


def closed() -> str:
    return f"127.0.0.1:{free_port()}"  # nothing listens there


def url_cases() -> dict[str, str]:
    """``$LEASE_STORE_URL`` values: every scheme in every way a password is
    written, then URLs whose shape is wrong where the password is."""
    a, b = HALVES
    cases = {}
    for scheme, (path, query) in SCHEMES.items():
        host = f"{closed()},{closed()}" if scheme in MULTI_HOST else closed()
        for shape, url in url_shapes(scheme, host, path, query).items():
            cases[f"{scheme} {shape}"] = url
    cases.update({
        # The review's: the password's '@:' left raw, its halves as user-info and host list.
        "sentinel '@:' in the password": f"redis+sentinel://u:{a}@:{b}/leases",
        "sentinel raw '@' in the password": f"redis+sentinel://u:{a}@:{b}@{closed()}/leases",
        "cluster '@' forgotten": f"redis+cluster://u:{a},{closed()}",
        "cluster '@' forgotten, no user": f"redis+cluster://:{WHOLE},{closed()}",
        "sentinel password where a port goes": f"rediss+sentinel://{closed()},s2:{WHOLE}/leases",
        "sentinel raw '/' in the password": f"redis+sentinel://u:{a}/{b}@{closed()},{closed()}/leases",
        "cluster '[' in the password": f"redis+cluster://u:{a}[{b}@{closed()},{closed()}",
        "sentinel bad percent-escape": f"redis+sentinel://u:{a}%zz{b}@{closed()}/leases",
        "redis password where the port goes": f"redis://u:{a}@:{b}/0",
        "postgresql password where the port goes": f"postgresql://u:{a}@h:{b}/leases",
        "postgresql bad percent-escape": f"postgresql://u:{a}%zz{b}@{closed()}/leases",
        "postgresql raw space": f"postgresql://u:{a} {b}@{closed()}/leases?connect_timeout=2",
        "mongodb password where the port goes": f"mongodb://u:{a}@h:{b}/leases",
        "mongodb raw '@' in the password": f"mongodb://u:{a}@:{b}@{closed()}/leases",
    })
    return cases


def connection_cases() -> dict[str, dict[str, Any]]:
    """``lease_default`` Connections (the usual way) holding the password."""
    port = int(closed().rpartition(":")[2])
    base = {"host": "127.0.0.1", "port": port, "login": "leaseuser", "password": PASSWORD}
    fast_mongo = {"lease_options": {"serverSelectionTimeoutMS": 300, "connectTimeoutMS": 300}}
    return {
        "redis connection": {"conn_type": "redis", **base, "schema": "0"},
        "rediss connection": {"conn_type": "redis", **base, "extra": {"ssl": True}},
        "postgres connection": {"conn_type": "postgres", **base, "schema": "leases",
                                "extra": {"connect_timeout": 2}},
        "mongo connection": {"conn_type": "mongo", **base, "schema": "leases", "extra": fast_mongo},
        "postgres connection, bad percent-escape": {
            "conn_type": "postgres", **base, "password": f"{HALVES[0]}%zz{HALVES[1]}",
            "schema": "leases"},
        "redis connection, password in lease_options": {
            "conn_type": "redis", "host": "127.0.0.1", "port": port,
            "extra": {"lease_options": {"password": PASSWORD}}},
    }


#: (user, method, path): every route that opens the store, as a viewer where
#: a viewer may use it (the review's 503 went to a viewer), else as admin.
ROUTES = [
    ("viewer", "GET", "/leases/"),
    ("viewer", "GET", "/leases/history?key=k1"),
    ("viewer", "GET", "/leases/dag?dag_id=billing"),
    ("viewer", "GET", "/leases/api/leases"),
    ("viewer", "GET", "/leases/api/lease?key=k1"),
    ("viewer", "GET", "/leases/api/history?key=k1"),
    ("viewer", "GET", "/leases/api/dag?dag_id=billing"),
    ("admin", "GET", "/leases/break?key=k1"),
    ("admin", "POST", "/leases/api/break?key=k1"),
]


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[ApiServer, Path]]:
    home = Path(tempfile.mkdtemp(prefix="lease-ui-secrets-"))
    case_file = home / "store-case.json"
    case_file.write_text(json.dumps({"url": f"sqlite://{home}/leases.db"}))
    api = ApiServer(home, home / "leases.db", python_path=(str(HERE),), extra_env={
        "AIRFLOW__SECRETS__BACKEND": "switchable_store.SwitchableStoreBackend",
        "AIRFLOW__SECRETS__BACKEND_KWARGS": json.dumps({"path": str(case_file)})})
    # The Connection comes from the switchable backend only: without it the
    # page falls back to $LEASE_STORE_URL, which the backend sets per case.
    del api.env["AIRFLOW_CONN_LEASE_DEFAULT"]
    with running(api):
        yield api, case_file


def leaked(text: str) -> list[str]:
    return sorted(p for p in FORBIDDEN if p in text)


def test_no_leases_page_or_endpoint_shows_a_store_password_in_its_errors(
        server: tuple[ApiServer, Path]) -> None:
    api, case_file = server
    cases: dict[str, dict[str, Any]] = {name: {"url": url} for name, url in url_cases().items()}
    cases.update({name: {"connection": conn} for name, conn in connection_cases().items()})
    headers = {user: {"Authorization": f"Bearer {api.token(user)}"} for user in ("admin", "viewer")}
    found, kinds = [], set()
    with httpx.Client(base_url=api.base, timeout=60) as http:
        for name, case in cases.items():
            case_file.write_text(json.dumps(case))
            for user, method, path in ROUTES:
                extra = {"X-Lease-Break": "k1"} if method == "POST" else {}
                response = http.request(method, path, headers={**headers[user], **extra})
                said = response.text + "\n" + "\n".join(f"{k}: {v}" for k, v in
                                                        response.headers.items())
                assert response.status_code == 503, (name, path, response.status_code, said)
                detail = response.json()["detail"] if "/api/" in path else response.text
                kind = next((k for k in ("configuration", "store") if f"lease {k} error" in detail),
                            None)
                assert kind, (name, path, said)
                if "connection" in case:  # served from the Connection, not a stale URL
                    assert f"127.0.0.1:{case['connection']['port']}" in detail, (name, detail)
                kinds.add(kind)
                if leaked(said):
                    at = said.index(leaked(said)[0])
                    found.append((name, method, path, leaked(said), said[max(0, at - 200):at + 60]))
    assert not found, "password pieces in error responses:\n" + "\n".join(map(repr, found))
    assert not leaked(api.log.read_text(errors="replace")), leaked(api.log.read_text())
    # Both kinds of failure were served: unreachable stores and refused URLs.
    assert kinds == {"configuration", "store"}, kinds

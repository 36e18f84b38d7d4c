"""The Leases page on a real api-server: who sees what, who may break, and
what a break does to a live holder in another process. Requests go over HTTP
exactly as the browser's (session cookie) or a script's (Bearer token)."""

from __future__ import annotations

import re

import httpx
from api_server import ApiServer, poll
from conftest import Holder, as_user

from lease_integrations import connect


def reads(key: str) -> list[tuple[str, str]]:
    return [("GET", "/leases/"), ("GET", f"/leases/?prefix={key}"), ("GET", f"/leases/history?key={key}"),
            ("GET", "/leases/dag?dag_id=billing"), ("GET", "/leases/api/leases"),
            ("GET", f"/leases/api/lease?key={key}"), ("GET", f"/leases/api/history?key={key}"),
            ("GET", "/leases/api/dag?dag_id=billing")]


def test_anonymous_requests_get_401_and_no_lease_data(http: httpx.Client, holder: Holder) -> None:
    routes = [*reads(holder.key), ("GET", f"/leases/break?key={holder.key}")]
    for method, path in routes:
        response = http.request(method, path)
        assert response.status_code == 401, (path, response.status_code, response.text[:300])
        assert holder.key not in response.text and holder.name not in response.text
        kind = "application/json" if "/api/" in path else "text/html"
        assert response.headers["content-type"].startswith(kind), (path, response.headers)
    form = http.post("/leases/break", data={"key": holder.key, "token": str(holder.token)})
    header = http.post(f"/leases/api/break?key={holder.key}", headers={"X-Lease-Break": holder.key})
    assert (form.status_code, header.status_code) == (401, 401)
    assert holder.stopped() is None


def test_viewer_sees_a_live_holder_and_its_history_but_may_not_break(
        api_server: ApiServer, http: httpx.Client, tokens: dict[str, str], holder: Holder) -> None:
    viewer = as_user(tokens, "viewer", cookie=True)
    page = http.get("/leases/", headers=viewer)
    assert page.status_code == 200
    assert holder.key in page.text and holder.name in page.text
    assert "Airflow Connection &#39;lease_default&#39;" in page.text
    assert "Break…" not in page.text
    # The holder's meta links to its DAG run, relative to the page.
    assert 'href="../dags/billing/runs/live"' in page.text

    listed = http.get(f"/leases/api/leases?prefix={holder.key}", headers=viewer).json()
    (record,) = listed["leases"]
    assert (record["key"], record["state"], record["holder"], record["token"]) == (
        holder.key, "held", holder.name, holder.token)
    assert listed["may_break"] is False
    assert listed["store"] == api_server.store_url

    history = http.get(f"/leases/api/history?key={holder.key}", headers=viewer).json()["events"]
    assert [(e["kind"], e["token"]) for e in history] == [("acquired", holder.token)]
    assert holder.key in http.get(f"/leases/history?key={holder.key}", headers=viewer).text
    assert holder.key in http.get("/leases/dag?dag_id=billing", headers=viewer).text

    bearer = as_user(tokens, "viewer")
    refused = [
        http.get(f"/leases/break?key={holder.key}", headers=viewer),
        http.post("/leases/break", headers=viewer, data={"key": holder.key, "token": str(holder.token)}),
        http.post(f"/leases/api/break?key={holder.key}", headers={**bearer, "X-Lease-Break": holder.key}),
    ]
    assert [r.status_code for r in refused] == [403, 403, 403], [r.text for r in refused]
    assert _current_holder(api_server, holder.key) == holder.name
    assert holder.stopped() is None


def test_a_cross_site_post_without_the_confirmation_is_refused(
        api_server: ApiServer, http: httpx.Client, tokens: dict[str, str], holder: Holder) -> None:
    """What a page on another site can make an admin's browser send: the
    session cookie and a plain form, but no custom header and no token from
    our confirm page."""
    admin = {**as_user(tokens, "admin", cookie=True), "Origin": "https://elsewhere.example",
             "Referer": "https://elsewhere.example/evil.html"}
    attempts = [
        http.post("/leases/break", headers=admin, data={"key": holder.key, "token": str(holder.token)}),
        http.post("/leases/break", headers=admin,
                  data={"key": holder.key, "token": str(holder.token), "confirm": "1.deadbeef"}),
        http.post(f"/leases/api/break?key={holder.key}", headers=admin),
    ]
    assert [r.status_code for r in attempts] == [403, 403, 403], [r.text for r in attempts]
    assert _current_holder(api_server, holder.key) == holder.name
    assert holder.stopped() is None


def test_admin_breaks_through_the_two_step_page_and_the_holder_gets_lease_lost(
        api_server: ApiServer, http: httpx.Client, tokens: dict[str, str], holder: Holder) -> None:
    admin = as_user(tokens, "admin", cookie=True)
    listing = http.get("/leases/", headers=admin)
    assert f'href="break?key={holder.key}"' in listing.text  # step one is a link, no dialog
    confirm_page = http.get(f"/leases/break?key={holder.key}", headers=admin)
    assert confirm_page.status_code == 200
    fields = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', confirm_page.text))
    assert fields["key"] == holder.key and fields["token"] == str(holder.token)

    broken = http.post("/leases/break", headers=admin, data=fields)
    assert broken.status_code == 200, broken.text
    assert "recorded as broken by admin" in broken.text

    reason = poll(holder.stopped, "fail-stop to end the holder", 30.0, 0.1)
    assert "refused" in reason  # the holder's renewal was refused: its on_lost callback ran
    history = http.get(f"/leases/api/history?key={holder.key}", headers=admin).json()["events"]
    broke = [e for e in history if e["kind"] == "broken"]
    assert [(e["token"], e["detail"].get("by")) for e in broke] == [(holder.token, "admin")]
    assert "by=admin" in http.get(f"/leases/history?key={holder.key}", headers=admin).text
    assert _current_holder(api_server, holder.key) is None

    # The same confirmation cannot break whoever holds the key next.
    again = http.post("/leases/break", headers=admin, data=fields)
    assert again.status_code == 404 and "nothing was broken" in again.text


def test_a_script_breaks_with_the_header(
        api_server: ApiServer, http: httpx.Client, tokens: dict[str, str], holder: Holder) -> None:
    admin = {**as_user(tokens, "admin"), "X-Lease-Break": holder.key}
    stale = http.post(f"/leases/api/break?key={holder.key}&token={holder.token + 1}", headers=admin)
    assert stale.status_code == 409
    response = http.post(f"/leases/api/break?key={holder.key}&token={holder.token}", headers=admin)
    assert response.status_code == 200
    assert response.json()["broken"] is True and response.json()["by"] == "admin"
    poll(holder.stopped, "fail-stop to end the holder", 30.0, 0.1)


def test_auth_matrix(http: httpx.Client, tokens: dict[str, str], holder: Holder) -> None:
    """Every read route for anonymous / viewer / admin (printed: it goes in the docs)."""
    rows = []
    for method, path in [*reads(holder.key), ("GET", f"/leases/break?key={holder.key}")]:
        codes = [http.request(method, path, headers=as_user(tokens, user)).status_code
                 for user in (None, "viewer", "admin")]
        rows.append((f"{method} {path.replace(holder.key, '<key>')}", codes))
    print("\nroute  anonymous viewer admin")
    for route, codes in rows:
        print(route, *codes)
    expected = [[401, 200, 200]] * len(reads(holder.key)) + [[401, 403, 200]]
    assert [codes for _, codes in rows] == expected


def _current_holder(api_server: ApiServer, key: str) -> str | None:
    store = connect(api_server.store_url)
    try:
        record = store.get(key)
        return None if record is None else record.holder
    finally:
        store.close()

"""Clickjacking (issue 24, item 3): every response of the Leases app tells
the browser that only the Airflow UI's own origin may frame it. The page
lives in the UI's iframe, so ``DENY`` would break it; ``frame-ancestors
'self'`` refuses a page on any other origin, a sibling port or subdomain of
the same site included, which could otherwise frame the confirm page
invisibly and have a signed-in admin click its button."""

from __future__ import annotations

import httpx
from conftest import Holder, as_user

FRAME_POLICY = "frame-ancestors 'self'"


def test_every_leases_response_may_be_framed_only_by_the_airflow_ui(
        http: httpx.Client, tokens: dict[str, str], holder: Holder) -> None:
    k = holder.key
    routes = ["/leases/", f"/leases/history?key={k}", "/leases/dag?dag_id=billing",
              f"/leases/break?key={k}", "/leases/api/leases", f"/leases/api/lease?key={k}",
              f"/leases/api/history?key={k}", "/leases/api/dag?dag_id=billing",
              "/leases/break?key=never-held", "/leases/api/lease?key=never-held"]
    seen = []
    for user in (None, "viewer", "admin"):
        for path in routes:
            response = http.get(path, headers=as_user(tokens, user, cookie=True))
            seen.append((user, path, response.status_code))
            policy = response.headers.get("content-security-policy", "")
            assert FRAME_POLICY in policy, (user, path, response.status_code, dict(response.headers))
            assert response.headers.get("x-frame-options") == "SAMEORIGIN", (user, path)
    assert {code for _, _, code in seen} >= {200, 401, 403, 404}
    posted = http.post("/leases/break", headers=as_user(tokens, "viewer", cookie=True),
                       data={"key": k, "token": str(holder.token)})
    assert posted.status_code == 403 and FRAME_POLICY in posted.headers["content-security-policy"]

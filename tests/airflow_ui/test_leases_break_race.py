"""The UI's break on a token against a key that changes hands all the time
(issue 24, item 8): a taker process grants, renews and releases the key in a
loop while the test reads the key's token and breaks on it through the real
api-server. The page used to check the token and then break whoever held
the key, so a new holder that took the key in between was broken; the break
is now conditional in the store, so it only ever ends the lease it aimed at."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
from api_server import ApiServer
from conftest import as_user

WORKER = Path(__file__).resolve().parents[1] / "conformance" / "break_race_worker.py"
#: Breaks to attempt: the old check-then-break broke a wrong lease within a
#: few dozen on this machine.
ATTEMPTS = 200
#: Seconds of "work" the taker does per renewal while it holds the key: long
#: enough for a break through HTTP to find the lease still held often, short
#: enough for the key to change hands between a read and a break often.
WORK = 0.005


def test_a_break_on_a_token_never_ends_the_next_holders_lease(
        api_server: ApiServer, http: httpx.Client, tokens: dict[str, str], key: str,
        tmp_path: Path) -> None:
    admin = {**as_user(tokens, "admin"), "X-Lease-Break": key}
    me = tmp_path / "ui-breaker.jsonl"  # the taker goes on until <me>.done exists
    taken = tmp_path / "taker.jsonl"
    taker = subprocess.Popen([sys.executable, str(WORKER), "take", "--url", api_server.store_url,
                              "--key", key, "--out", str(taken), "--rounds", "1",
                              "--breaker", str(me), "--work", str(WORK)])
    aimed: list[dict[str, object]] = []
    try:
        deadline = time.monotonic() + 120
        while len(aimed) < ATTEMPTS and time.monotonic() < deadline:
            current = http.get(f"/leases/api/lease?key={key}", headers=admin)
            if current.status_code == 404 or current.json()["holder"] is None:
                continue
            token = current.json()["token"]
            response = http.post(f"/leases/api/break?key={key}&token={token}", headers=admin)
            assert response.status_code in (200, 404, 409), response.text  # 404: released by now
            body = response.json()
            before = body.get("before") if response.status_code == 200 else None
            aimed.append({"aimed": token, "code": response.status_code,
                          "broken": response.status_code == 200 and body["broken"],
                          "before": None if before is None else before["token"]})
    finally:
        me.with_suffix(".done").touch()
        assert taker.wait(timeout=60) == 0

    broken = [a for a in aimed if a["broken"]]
    wrong = [a for a in broken if a["before"] != a["aimed"]]
    assert wrong == [], f"{len(wrong)} of {len(broken)} breaks ended a lease they did not aim at"
    lost = {json.loads(line)["token"] for line in taken.read_text().splitlines()
            if not json.loads(line)["released"]}
    assert lost == {a["aimed"] for a in broken}
    assert len(aimed) == ATTEMPTS and broken, (len(aimed), len(broken))

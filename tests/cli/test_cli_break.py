"""``leasectl break``: refused without --yes, recorded with who broke it, and
a live holder in another process reports the loss."""

from __future__ import annotations

import getpass
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_helpers import Leasectl, poll, table_rows

from lease_integrations import LEASE_LOST_EXIT_STATUS, LeaseStore, connect

HOLDER = "worker-7:99:00000000000000ff"
HOLDER_SCRIPT = Path(__file__).with_name("holder_process.py")


@pytest.fixture
def store(cli_url: str) -> Iterator[LeaseStore]:
    s = connect(cli_url)
    yield s
    s.close()


def test_break_without_yes_is_refused_and_changes_nothing(
    store: LeaseStore, cli_url: str, key: str, leasectl: Leasectl
) -> None:
    rec = store.acquire(key, HOLDER, HOLDER, 30, {"dag_id": "billing"}).record
    assert rec is not None
    result = leasectl("--url", cli_url, "break", key)
    assert result.code == 4
    assert "--yes" in result.err and HOLDER in result.err and f"token {rec.token}" in result.err
    record = store.get(key)
    assert record is not None and (record.holder, record.token) == (HOLDER, rec.token)
    assert [e.kind for e in store.history(key)] == ["acquired"]


def test_break_with_yes_clears_the_holder_and_records_who(
    store: LeaseStore, cli_url: str, key: str, leasectl: Leasectl
) -> None:
    rec = store.acquire(key, HOLDER, HOLDER, 30, {}).record
    assert rec is not None
    result = leasectl("--url", cli_url, "break", key, "--yes")
    assert result.code == 0, result.err
    assert f"token {rec.token} of {HOLDER}" in result.out
    record = store.get(key)
    assert record is not None and record.holder is None and record.token == rec.token
    last = store.history(key)[-1]
    assert (last.kind, last.token, last.holder) == ("broken", rec.token, HOLDER)
    assert last.detail["by"] == f"{getpass.getuser()}@{socket.gethostname()}"
    # The counter survived the break: the next grant gets a greater token.
    granted = store.acquire(key, "next:1:0000000000000001", "next:1:0000000000000001", 30, {})
    assert granted.granted and granted.record is not None and granted.record.token > rec.token


def test_break_json_and_not_held_and_unknown(
    store: LeaseStore, cli_url: str, key: str, leasectl: Leasectl
) -> None:
    assert leasectl("--url", cli_url, "break", key, "--yes").code == 1  # never acquired
    assert store.acquire(key, HOLDER, HOLDER, 30, {}).granted
    data = json.loads(leasectl("--url", cli_url, "break", key, "--yes", "--by", "ci",
                               "--json").out)
    assert (data["broken"], data["by"], data["before"]["holder"]) == (True, "ci", HOLDER)
    again = leasectl("--url", cli_url, "break", key, "--yes")
    assert again.code == 0 and "nothing to break" in again.out
    assert [e.kind for e in store.history(key)] == ["acquired", "broken"]  # no second break


def test_break_on_a_token_breaks_only_that_lease(
    store: LeaseStore, cli_url: str, key: str, leasectl: Leasectl
) -> None:
    """``--token N``: what the operator looked at is what gets broken. A
    holder that took the key since is left alone (exit 4), in one step in
    the store, not a check here and a break after it."""
    first = store.acquire(key, HOLDER, HOLDER, 30, {}).record
    assert first is not None and store.release(key, HOLDER, first.token)
    nxt = "next:2:0000000000000002"
    second = store.acquire(key, nxt, nxt, 30, {}).record
    assert second is not None
    stale = leasectl("--url", cli_url, "break", key, "--yes", "--token", str(first.token))
    assert stale.code == 4, (stale.out, stale.err)
    assert f"token {second.token}" in stale.err and f"--token {first.token}" in stale.err
    record = store.get(key)
    assert record is not None and (record.holder, record.token) == (nxt, second.token)
    assert "broken" not in [e.kind for e in store.history(key)]

    data = json.loads(leasectl("--url", cli_url, "break", key, "--yes", "--by", "ci",
                               "--token", str(second.token), "--json").out)
    assert (data["broken"], data["before"]["token"], data["before"]["holder"]) == (
        True, second.token, nxt)
    last = store.history(key)[-1]
    assert (last.kind, last.token, last.detail.get("by")) == ("broken", second.token, "ci")
    # The same token again: released by now, nothing to break (exit 0, no second event).
    again = leasectl("--url", cli_url, "break", key, "--yes", "--token", str(second.token))
    assert again.code == 0 and "nothing to break" in again.out
    assert [e.kind for e in store.history(key)].count("broken") == 1
    bad = leasectl("--url", cli_url, "break", key, "--yes", "--token", "seven")
    assert bad.code == 2 and "--token" in bad.err


def test_break_stops_a_live_holder_in_another_process_which_records_the_loss(
    cli_url: str, key: str, tmp_path: Path, leasectl: Leasectl
) -> None:
    out = tmp_path / "holder"
    out.mkdir()
    proc = subprocess.Popen([sys.executable, str(HOLDER_SCRIPT), cli_url, key, str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        def ready() -> str | None:
            if proc.poll() is not None:
                raise AssertionError(f"holder exited early: {proc.stdout.read()}")  # type: ignore[union-attr]
            path = out / "ready"
            return path.read_text() if path.exists() else None

        token, holder = poll(ready, 60, "the holder to take the lease").split()
        shown = json.loads(leasectl("--url", cli_url, "show", key, "--json").out)["lease"]
        assert (shown["state"], shown["holder"], shown["token"]) == ("held", holder, int(token))

        broke = leasectl("--url", cli_url, "break", key, "--yes", "--by", "oncall@pager")
        assert broke.code == 0, broke.err
        assert holder in broke.out

        reason = poll(lambda: (out / "callback").exists() and (out / "callback").read_text(),
                      30, "the holder's lease.lost callback")
        assert "refused" in reason
        assert proc.wait(timeout=30) == LEASE_LOST_EXIT_STATUS  # fail-stop ended the holder
        assert not (out / "finished").exists()

        def lost_event() -> dict[str, object] | None:
            events = json.loads(leasectl("--url", cli_url, "history", key, "--json").out)["events"]
            return next((e for e in events if e["kind"] == "lost"), None)

        lost = poll(lost_event, 30, "the holder's 'lost' event in the history")
        assert (lost["token"], lost["holder"]) == (int(token), holder)
        history = leasectl("--url", cli_url, "history", key)
        rows = table_rows(history.out, "AT (UTC)")
        assert [(r["EVENT"], r["TOKEN"]) for r in rows] == [
            ("acquired", token), ("broken", token), ("lost", token)]
        assert "! BROKEN by oncall@pager" in history.out
        assert "x LOST: " in history.out and " after the break" in history.out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)

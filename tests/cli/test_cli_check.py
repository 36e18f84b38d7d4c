"""``leasectl check``: the public history checker on a key's real history,
with the user's fenced writes from a file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import Leasectl

from lease_integrations import connect


def test_check_reports_a_clean_history_and_a_stale_write(
        cli_url: str, key: str, tmp_path: Path, leasectl: Leasectl) -> None:
    with connect(cli_url) as store:
        first = store.acquire(key, "alice", "secret-a", 30.0, {}).record
        assert first is not None and store.release(key, "secret-a", first.token)
        second = store.acquire(key, "bob", "secret-b", 30.0, {}).record
        assert second is not None

    ok = leasectl("--url", cli_url, "check", key, "--ttl", "30")
    assert ok.code == 0, ok.err
    assert "2 grant(s)" in ok.out and "OK" in ok.out

    writes = tmp_path / "writes.jsonl"
    writes.write_text("\n".join(json.dumps(w) for w in [
        {"token": first.token, "accepted": True}, {"token": second.token, "accepted": True},
        {"token": first.token, "accepted": True}]) + "\n")
    bad = leasectl("--url", cli_url, "check", key, "--writes", str(writes))
    assert bad.code == 7, bad.out + bad.err
    assert "first violation: [stale-write]" in bad.out
    as_json = json.loads(leasectl("--url", cli_url, "check", key, "--writes", str(writes), "--json").out)
    assert not as_json["ok"] and as_json["violations"][0]["rule"] == "stale-write"
    assert as_json["violations"][0]["tokens"] == [first.token, second.token]


def test_check_of_an_unknown_key_or_a_bad_writes_file(
        cli_url: str, key: str, tmp_path: Path, leasectl: Leasectl) -> None:
    with connect(cli_url) as store:
        store.acquire(key, "alice", "secret-a", 30.0, {})
    assert leasectl("--url", cli_url, "check", key + "-never").code == 1
    garbage = tmp_path / "writes.jsonl"
    garbage.write_text('{"token": "x"}\n')
    result = leasectl("--url", cli_url, "check", key, "--writes", str(garbage))
    assert result.code == 2 and "line 1" in result.err
    assert leasectl("--url", cli_url, "check", key, "--ttl", "-1").code == 2


def test_a_writes_file_is_read_by_exact_types(
        cli_url: str, key: str, tmp_path: Path, leasectl: Leasectl) -> None:
    """Issue 32, finding 7: a verdict read loosely switches a rule off without
    a word (``"false"`` counted as accepted; ``at: NaN`` made the late-write
    rule compare nothing), and deeply nested JSON was an internal error (5).
    Each is a usage error (2) naming its line."""
    if not cli_url.startswith("sqlite"):
        pytest.skip("parsing the file needs no second store")
    with connect(cli_url) as store:
        store.acquire(key, "alice", "secret-a", 30.0, {})
    lines = {
        "nested": "[" * 100_000 + "]" * 100_000,
        "accepted as text": '{"token": 1, "accepted": "false"}',
        "accepted as a number": '{"token": 1, "accepted": 0}',
        "token as text": '{"token": "1", "accepted": true}',
        "token as a bool": '{"token": true, "accepted": true}',
        "at NaN": '{"token": 1, "accepted": true, "at": NaN}',
        "at Infinity": '{"token": 1, "accepted": true, "at": Infinity}',
        "at huge": '{"token": 1, "accepted": true, "at": 1e400}',
        "at a bool": '{"token": 1, "accepted": true, "at": true}',
        "not an object": "[1, true]",
    }
    for name, line in lines.items():
        writes = tmp_path / "writes.jsonl"
        writes.write_text('{"token": 1, "accepted": true}\n' + line + "\n")
        result = leasectl("--url", cli_url, "check", key, "--writes", str(writes))
        assert (result.code, "line 2" in result.err) == (2, True), (name, result.code, result.err)

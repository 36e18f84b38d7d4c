"""What leasectl prints cannot be forged or abused by what a record holds:
control characters in meta or a breaker's name are escaped (no extra rows,
no escape codes reaching the terminal), --json is strict JSON, and one
unreadable record does not hide the others."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import Leasectl, table_rows

from lease_integrations import LeaseLock, LeaseStore, connect
from lease_integrations.core import store as store_protocol
from lease_integrations.stores.sqlite import path_from_url

#: Invisible format characters a hand-made list missed (issue 24, item 6): the
#: Arabic letter mark, the deprecated format controls, interlinear annotation,
#: tag characters, the soft hyphen and the Mongolian vowel separator.
INVISIBLE = ("\u061c", "\u206a", "\u206f", "\ufff9", "\ufffb", "\U000e0001", "\U000e0041",
             "\U000e007f", "\u00ad", "\u180e")
#: A newline that tries to start a forged row, a screen clear, a colour, an
#: OSC title change ended by BEL, a C1 CSI, a right-to-left override, and
#: the invisible characters above.
EVIL = ("x\nforged/key  held  mallory  99  1s  30s  dag=evil\x1b[2J\x1b[31m\x1b]0;pwned\x07\x9b1m\u202e"
        + "".join(INVISIBLE))
RAW_CONTROLS = ("\x1b", "\x07", "\x9b", "\u202e", *INVISIBLE)


@pytest.fixture
def store(cli_url: str) -> Iterator[LeaseStore]:
    s = connect(cli_url)
    yield s
    s.close()


def strict_json(text: str) -> Any:
    def refuse(token: str) -> None:
        raise AssertionError(f"not strict JSON: bare {token}")
    return json.loads(text, parse_constant=refuse)


def assert_inert(text: str) -> None:
    for control in RAW_CONTROLS:
        assert control not in text, f"raw {control!r} reached the terminal:\n{text!r}"


def test_control_characters_in_meta_cannot_forge_rows_or_reach_the_terminal(
        store: LeaseStore, cli_url: str, key: str, leasectl: Leasectl) -> None:
    meta = {"dag_id": EVIL, "task_id": "t", "run_id": EVIL, "note": EVIL}
    with LeaseLock(store, key, ttl=30, meta=meta).hold():
        listing = leasectl("--url", cli_url, "list", key)
        assert listing.code == 0, listing.err
        assert_inert(listing.out)
        lines = listing.out.splitlines()
        header = next(i for i, line in enumerate(lines) if line.startswith("KEY"))
        rows = lines[header + 1:]
        assert len(rows) == 1 and rows[0].startswith(key), listing.out  # no forged row
        assert "x\\nforged/key" in rows[0] and "\\x1b[2J\\x1b[31m" in rows[0]
        assert "\\u061c\\u206a\\u206f\\ufff9\\ufffb\\U000e0001" in rows[0]

        shown = leasectl("--url", cli_url, "show", key)
        assert shown.code == 0, shown.err
        assert_inert(shown.out)
        assert not any(line.startswith("forged") for line in shown.out.splitlines())

        for command in (["list", key], ["show", key], ["history", key]):
            as_json = leasectl("--url", cli_url, "--json", *command)
            assert as_json.code == 0, as_json.err
            assert_inert(as_json.out)
            strict_json(as_json.out)
        lease = strict_json(leasectl("--url", cli_url, "--json", "show", key).out)["lease"]
        assert lease["meta"]["note"] == EVIL  # escaped for the terminal, exact in JSON

    history = leasectl("--url", cli_url, "history", key)
    assert history.code == 0, history.err
    assert_inert(history.out)
    assert not any(line.startswith("forged") for line in history.out.splitlines())


def test_a_breakers_name_is_escaped_on_the_way_out_and_refused_on_the_way_in(
        store: LeaseStore, cli_url: str, key: str, leasectl: Leasectl) -> None:
    lease = LeaseLock(store, key, ttl=30, on_lost="check").acquire()
    refused = leasectl("--url", cli_url, "break", key, "--yes", "--by", "ops\x1b[31m\nroot")
    assert refused.code == 2, refused
    assert "control characters" in refused.err
    assert_inert(refused.out + refused.err)
    assert store.get(key).holder == lease.holder  # type: ignore[union-attr]

    # Someone calling the store directly (or an older leasectl) stored one anyway.
    store.force_release(key, "ops\x1b]0;pwned\x07\nforged  row")
    for command in (["history", key], ["show", key]):
        out = leasectl("--url", cli_url, *command)
        assert out.code == 0, out.err
        assert_inert(out.out)
        assert not any(line.startswith("forged") for line in out.out.splitlines())
        assert "ops\\x1b]0;pwned\\x07\\nforged  row" in out.out


def sqlite_file(cli_url: str) -> Path:
    if not cli_url.startswith("sqlite:"):
        pytest.skip("writes the record with the store's own client: SQLite only")
    return path_from_url(cli_url)


def test_json_is_strict_even_for_a_nan_an_older_version_stored(
        store: LeaseStore, cli_url: str, key: str, leasectl: Leasectl) -> None:
    path = sqlite_file(cli_url)
    with LeaseLock(store, key, ttl=30).hold():
        with sqlite3.connect(path) as db:
            db.execute("UPDATE leases SET meta = ? WHERE key = ?",
                       ('{"load": NaN, "peak": Infinity, "low": -Infinity}', key))
        for command in (["list", key], ["show", key], ["history", key]):
            out = leasectl("--url", cli_url, "--json", *command)
            assert out.code == 0, out.err
            strict_json(out.out)
        meta = strict_json(leasectl("--url", cli_url, "--json", "show", key).out)["lease"]["meta"]
        assert (meta["load"], meta["peak"], meta["low"]) == ("NaN", "Infinity", "-Infinity")


@pytest.mark.skipif(not hasattr(store_protocol, "RecordList"),
                    reason="needs the stores to report unreadable keys (RecordList, b1-tokens)")
def test_an_unreadable_record_shows_as_unreadable_and_the_rest_normally(
        store: LeaseStore, cli_url: str, key: str, leasectl: Leasectl) -> None:
    path = sqlite_file(cli_url)
    for name in ("a-good", "b-bad", "c-good"):
        with LeaseLock(store, f"{key}/{name}", ttl=30).hold():
            pass
    with sqlite3.connect(path) as db:
        db.execute("UPDATE leases SET meta = '{not json' WHERE key = ?", (f"{key}/b-bad",))

    listing = leasectl("--url", cli_url, "list", f"{key}/")
    assert listing.code == 0, listing.err
    rows = {r["KEY"]: r for r in table_rows(listing.out, "KEY")}
    assert sorted(rows) == [f"{key}/a-good", f"{key}/b-bad", f"{key}/c-good"]
    assert rows[f"{key}/a-good"]["STATE"] == rows[f"{key}/c-good"]["STATE"] == "released"
    assert rows[f"{key}/b-bad"]["STATE"] == "UNREADABLE"
    assert "meta" in rows[f"{key}/b-bad"]["META"]

    as_json = strict_json(leasectl("--url", cli_url, "--json", "list", f"{key}/").out)
    assert [r["key"] for r in as_json["leases"]] == [f"{key}/a-good", f"{key}/c-good"]
    assert [(u["key"], u["field"]) for u in as_json["unreadable"]] == [(f"{key}/b-bad", "meta")]

    shown = leasectl("--url", cli_url, "show", f"{key}/b-bad")
    assert shown.code == 6, shown
    assert "UNREADABLE" in shown.out and "meta" in shown.out
    assert leasectl("--url", cli_url, "show", f"{key}/a-good").code == 0


def write_meta_as_a_client_would(store: LeaseStore, cli_url: str, key: str, meta_json: str) -> None:
    """Overwrite a record's meta with the store's own client (sqlite3, redis-py),
    as anyone with access to the store can."""
    if cli_url.startswith("sqlite:"):
        with sqlite3.connect(path_from_url(cli_url)) as db:
            db.execute("UPDATE leases SET meta = ? WHERE key = ?", (meta_json, key))
        return
    import redis

    client = redis.Redis.from_url(cli_url)
    try:
        assert client.hset(store._keys(key, "rec")[0], "meta", meta_json) == 0  # type: ignore[attr-defined]
    finally:
        client.close()


def test_a_lone_surrogate_in_meta_is_shown_escaped_and_hides_no_other_key(
        store: LeaseStore, cli_url: str, key: str, leasectl: Leasectl) -> None:
    """issue 24 item 5: a '\\ud800' escape in stored meta JSON decodes to a
    string no terminal encoding can print; leasectl stopped mid-table."""
    with contextlib.ExitStack() as held:
        for name in ("a", "b", "c"):
            held.enter_context(LeaseLock(store, f"{key}/{name}", ttl=30, meta={"dag_id": name}).hold())
        write_meta_as_a_client_would(store, cli_url, f"{key}/b",
                                     '{"dag_id": "d\\ud800x", "task_id": "t\\udfff", "note": "\\udbff"}')
        listing = leasectl("--url", cli_url, "list", f"{key}/")
        assert listing.code == 0, listing
        rows = {r["KEY"]: r for r in table_rows(listing.out, "KEY")}
        assert sorted(rows) == [f"{key}/a", f"{key}/b", f"{key}/c"], listing.out
        assert "dag=d\\ud800x" in rows[f"{key}/b"]["META"] and "\\udfff" in rows[f"{key}/b"]["META"]

        shown = leasectl("--url", cli_url, "show", f"{key}/b")
        assert shown.code == 0, shown
        assert "\\ud800" in shown.out and "\\udbff" in shown.out

        as_json = leasectl("--url", cli_url, "--json", "list", f"{key}/")
        assert as_json.code == 0, as_json
        leases = {r["key"]: r for r in strict_json(as_json.out)["leases"]}
        assert leases[f"{key}/b"]["meta"]["dag_id"] == "d\ud800x"  # exact in JSON
        assert leasectl("--url", cli_url, "history", f"{key}/b").code == 0

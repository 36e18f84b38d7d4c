"""The SQL fencing guard on SQLite, inside the caller's own transaction."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from lease_integrations import ConfigurationError, SqlFence, StaleToken


def ledger(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    SqlFence().create_table(conn)
    conn.execute("CREATE TABLE IF NOT EXISTS ledger (token INTEGER, note TEXT)")
    return conn


def fenced_write(conn: sqlite3.Connection, token: int, note: str) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        SqlFence().check(conn, "ledger", token)
        conn.execute("INSERT INTO ledger VALUES (?, ?)", (token, note))
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def test_newer_and_equal_tokens_pass_older_ones_are_rejected(tmp_path: Path) -> None:
    conn = ledger(tmp_path / "ledger.db")
    fenced_write(conn, 1, "first")
    fenced_write(conn, 1, "same holder again")
    fenced_write(conn, 3, "newer holder")
    with pytest.raises(StaleToken) as stale:
        fenced_write(conn, 2, "paused holder wakes up")
    assert stale.value.token == 2 and stale.value.newest == 3 and stale.value.resource == "ledger"
    rows = conn.execute("SELECT token, note FROM ledger").fetchall()
    assert rows == [(1, "first"), (1, "same holder again"), (3, "newer holder")]
    assert SqlFence().newest(conn, "ledger") == 3


def test_a_rejected_write_rolls_back_with_the_callers_transaction(tmp_path: Path) -> None:
    conn = ledger(tmp_path / "ledger.db")
    fenced_write(conn, 5, "current")
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO ledger VALUES (4, 'written before the check')")
    with pytest.raises(StaleToken):
        SqlFence().check(conn, "ledger", 4)
    conn.execute("ROLLBACK")
    assert conn.execute("SELECT count(*) FROM ledger WHERE token = 4").fetchone() == (0,)


def test_resources_are_fenced_independently(tmp_path: Path) -> None:
    conn = ledger(tmp_path / "ledger.db")
    fence = SqlFence()
    fence.check(conn, "a", 10)
    fence.check(conn, "b", 2)
    with pytest.raises(StaleToken):
        fence.check(conn, "a", 9)


@pytest.mark.parametrize("table", ["bad-name", "x; DROP TABLE y", "", "1abc"])
def test_table_names_are_validated(table: str) -> None:
    with pytest.raises(ConfigurationError, match="fence table"):
        SqlFence(table)


@pytest.mark.parametrize("token", [0, -1, "3", None, True])
def test_tokens_are_validated(tmp_path: Path, token: object) -> None:
    conn = ledger(tmp_path / "ledger.db")
    with pytest.raises(ConfigurationError, match="token"):
        SqlFence().check(conn, "ledger", token)  # type: ignore[arg-type]

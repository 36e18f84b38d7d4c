"""A rolling upgrade of the SQLite store on one host: an old version's
process (``old_sqlite_store.py``, the released statements, frozen) holds a
lease in the file when the new version first opens it. The new version
migrates the file under it and must then report the lease busy, let the
old process renew and release it, grant tokens above every earlier one
whichever version grants (an old version granting after the new one too,
also after an operator's DELETE of the row), and show both versions' events
in order. The old version runs in its own process, as it would."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lease_integrations.stores.sqlite import SqliteStore

OLD = Path(__file__).with_name("old_sqlite_store.py")


class OldProcess:
    """The old version, one command per line, one JSON answer per line."""

    def __init__(self, path: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, str(OLD)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self("open", path) is True

    def __call__(self, *args: Any) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(" ".join(map(str, args)) + "\n")
        self.proc.stdin.flush()
        answer = json.loads(self.proc.stdout.readline())
        assert "error" not in answer, answer
        return answer["ok"]

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("exit\n")
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "leases.db"


@pytest.fixture
def old(db: Path) -> Iterator[OldProcess]:
    process = OldProcess(db)  # makes the file with the old schema
    yield process
    process.close()


def kinds(store: SqliteStore, key: str) -> list[tuple[str, int, str | None]]:
    return [(e.kind, e.token, e.holder) for e in store.history(key)]


def test_a_lease_held_by_the_old_version_survives_the_upgrade(db: Path, old: OldProcess) -> None:
    held = old("acquire", "job", "old-a", "sa", 30)
    assert held == {"granted": True, "holder": "old-a", "token": 1}
    new = SqliteStore(db)  # migrates the file while the old process holds the lease
    try:
        columns = {row[1] for row in new._connection().execute("PRAGMA table_info(leases)")}
        assert {"event_token", "event_detail"} <= columns, "the file was migrated"
        busy = new.acquire("job", "new-b", "sb", 30, {})
        assert not busy.granted and busy.record is not None
        assert (busy.record.holder, busy.record.token) == ("old-a", 1)
        # The old process keeps its lease through the upgrade, then lets go.
        assert old("renew", "job", "sa", 1, 30) is True
        assert old("release", "job", "sa", 1) is True
        granted = new.acquire("job", "new-b", "sb", 30, {"v": "new"})
        assert granted.granted and granted.record is not None and granted.record.token > 1
        t2 = granted.record.token  # floored by the clock: far above the old version's 1
        # The new version's grant is busy to the old one, and its release
        # lets the old one grant above it.
        assert old("acquire", "job", "old-c", "sc", 30)["granted"] is False
        assert new.release("job", "sb", t2)
        assert old("acquire", "job", "old-c", "sc", 30) == {
            "granted": True, "holder": "old-c", "token": t2 + 1}
        assert old("release", "job", "sc", t2 + 1) is True
        t4 = new.acquire("job", "new-d", "sd", 30, {}).record.token  # type: ignore[union-attr]
        assert t4 > t2 + 1
        # An old version granting over a new version's expired grant (a
        # takeover): the new grant's event comes first, then the old one's.
        assert new.release("job", "sd", t4)
        t5 = new.acquire("job", "new-e", "se", 0, {}).record.token  # type: ignore[union-attr]
        assert t5 > t4
        assert old("acquire", "job", "old-f", "sf", 30)["token"] == t5 + 1
        assert old("release", "job", "sf", t5 + 1) is True
        assert kinds(new, "job") == [
            ("acquired", 1, "old-a"), ("released", 1, "old-a"),
            ("acquired", t2, "new-b"), ("released", t2, "new-b"),
            ("acquired", t2 + 1, "old-c"), ("released", t2 + 1, "old-c"),
            ("acquired", t4, "new-d"), ("released", t4, "new-d"),
            ("acquired", t5, "new-e"),
            ("acquired", t5 + 1, "old-f"), ("released", t5 + 1, "old-f")]
        # The old version's own history reads the same table and order.
        assert [(k, t, h) for k, t, h, _ in old("history", "job")] == kinds(new, "job")
        events = new.history("job")
        assert events[2].detail == {"meta": {"v": "new"}} and events[8].detail == {"meta": {}}
        assert events[9].detail == {"meta": {}, "took_over": {"token": t5, "holder": "new-e"}}
    finally:
        new.close()


def test_tokens_keep_rising_after_a_delete_whichever_version_grants(
    db: Path, old: OldProcess
) -> None:
    assert old("acquire", "job", "old-a", "sa", 30)["token"] == 1
    assert old("release", "job", "sa", 1) is True
    new = SqliteStore(db)
    try:
        last = 1
        for _ in range(2):  # the new version's grants do not write the counter table
            rec = new.acquire("job", "new", "s", 30, {}).record
            assert rec is not None and rec.token > last
            last = rec.token
            assert new.release("job", "s", rec.token)
        with sqlite3.connect(db) as shell:  # an operator's cleanup
            shell.execute("DELETE FROM leases WHERE key = 'job'")
        # The old version, reading only the counter table, grants above.
        assert old("acquire", "job", "old-b", "sb", 30)["token"] == last + 1
        assert old("release", "job", "sb", last + 1) is True
        rec = new.acquire("job", "new", "s", 30, {}).record
        assert rec is not None and rec.token > last + 1
        # A held lease of the new version deleted with its grant's event
        # still in the row: the event is kept, the token too.
        with sqlite3.connect(db) as shell:
            shell.execute("DELETE FROM leases WHERE key = 'job'")
        assert old("acquire", "job", "old-c", "sc", 30)["token"] == rec.token + 1
        assert [(k, t) for k, t, _ in kinds(new, "job")][-3:] == [
            ("released", last + 1), ("acquired", rec.token), ("acquired", rec.token + 1)]
    finally:
        new.close()

"""``supersede``: a run replaces the holder, and the old holder can no longer
write. Real processes (``supersede_process.py``) writing fenced rows into a
SQLite ledger (``SqlFence`` and the row in one transaction), on SQLite and
Redis lease stores."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from lease_integrations import LEASE_LOST_EXIT_STATUS, LeaseLock, LeaseStore, connect
from lease_integrations.core.errors import ConfigurationError, SupersedeRefused
from lease_integrations.core.supersede_guards import only_newer, only_same
from tests.core.polling import poll

PROCESS = Path(__file__).with_name("supersede_process.py")


@pytest.fixture(params=["sqlite", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite://{tmp_path}/leases.db"
    found: str = request.getfixturevalue("redis_url")
    return found


@pytest.fixture
def store(url: str) -> Iterator[LeaseStore]:
    s = connect(url)
    yield s
    s.close()


class Runs:
    """The processes of one test, their files, and their ledger."""

    def __init__(self, url: str, key: str, tmp_path: Path) -> None:
        self.url, self.key, self.out = url, key, tmp_path
        self.db = tmp_path / "ledger.db"
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, *options: str) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen([sys.executable, str(PROCESS), self.url, self.key, str(self.db),
                                 str(self.out), name, *options])
        self.procs.append(proc)
        return proc

    def ready(self, name: str, proc: subprocess.Popen[bytes]) -> tuple[int, int, int, bool]:
        path = self.out / f"{name}.ready"

        def read() -> str | None:
            if path.exists():
                return path.read_text()
            if proc.poll() is not None:
                raise AssertionError(f"{name} ended ({proc.returncode}) without the lease")
            return None

        token, pid, granted, old_ran = poll(read, 60, f"{name} to take the lease").split()
        return int(token), int(pid), int(granted), old_ran == "1"

    def rows(self) -> list[tuple[int, int, int]]:
        with sqlite3.connect(self.db) as db:
            return list(db.execute("SELECT token, pid, at_ns FROM ledger_rows ORDER BY rowid"))

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)


@pytest.fixture
def runs(url: str, key: str, tmp_path: Path) -> Iterator[Runs]:
    r = Runs(url, key, tmp_path)
    yield r
    r.stop()


@pytest.mark.parametrize("gil", [False, True], ids=["busy-loop", "gil-bound"])
def test_a_superseding_run_replaces_the_holder_which_can_no_longer_write(
        runs: Runs, store: LeaseStore, key: str, gil: bool) -> None:
    old = runs.start("old", "--ttl", "3", *(["--gil"] if gil else []))
    old_token, old_pid, _, _ = runs.ready("old", old)
    poll(lambda: len(runs.rows()) >= 3, 30, "the old holder's first writes")
    new = runs.start("new", "--supersede", "--ttl", "3", "--rows", "5",
                     "--old-pid", str(old_pid))
    new_token, new_pid, granted, old_ran = runs.ready("new", new)
    assert new.wait(timeout=60) == 0
    assert new_token > old_token
    assert not old_ran, "the old holder still ran when the new run got the lease"
    # Fail-stop ended it: 75 from its ladder, or the keeper's SIGKILL for a
    # job that kept the GIL and could not run its ladder.
    assert old.wait(timeout=30) in (LEASE_LOST_EXIT_STATUS, -9)
    rows = runs.rows()
    assert {token for token, _, _ in rows} == {old_token, new_token}
    late = [row for row in rows if row[0] == old_token and row[2] >= granted]
    assert late == [], "the fence accepted a write of the old holder after the new grant"
    assert [row[0] for row in rows] == sorted(row[0] for row in rows)  # never back again
    events = store.history(key)
    broken = [e for e in events if e.kind == "broken"]
    assert [(e.token, e.holder) for e in broken] == [(old_token, f"{os.uname().nodename}:{old_pid}")]
    assert str(broken[0].detail["by"]).startswith(f"supersede by {os.uname().nodename}:{new_pid}")
    superseded = [e for e in events if e.kind == "superseded"]
    assert [(e.token, e.detail["by"]) for e in superseded] == [
        (old_token, f"{os.uname().nodename}:{new_pid}")]
    granted_event = next(e for e in events if e.kind == "acquired" and e.token == new_token)
    assert granted_event.detail["meta"]["supersedes"]["token"] == old_token


def test_racing_supersedes_end_with_one_holder_at_a_time(
        runs: Runs, store: LeaseStore, key: str) -> None:
    old = runs.start("old", "--ttl", "3")
    old_token, _, _, _ = runs.ready("old", old)
    names = [f"new{i}" for i in range(3)]
    racers = [runs.start(name, "--supersede", "--ttl", "3", "--rows", "20") for name in names]
    # A racer that read the old holder's token breaks it or loses that break
    # (then waits, busy); one that read a winner's token supersedes it in
    # turn, as the newest run should: that winner ends as the old one did
    # (75), or with LeaseLost (1) if its block ended before it noticed.
    codes = [proc.wait(timeout=90) for proc in racers]
    assert set(codes) <= {0, 1, LEASE_LOST_EXIT_STATUS}, codes
    assert old.wait(timeout=30) == LEASE_LOST_EXIT_STATUS
    ran = {name: runs.ready(name, proc) for name, proc in zip(names, racers, strict=True)
           if (runs.out / f"{name}.ready").exists()}
    assert ran  # (one superseded while it waited for its predecessor never began: LeaseLost)
    # Every holder's writes form one run in the ledger: nobody wrote while
    # another held the key, and the tokens only rise.
    rows = runs.rows()
    tokens = [token for token, _, _ in rows]
    runs_of_tokens = [t for i, t in enumerate(tokens) if i == 0 or tokens[i - 1] != t]
    assert runs_of_tokens == sorted(set(tokens)), runs_of_tokens
    assert runs_of_tokens[0] == old_token
    # Each break was of the lease its superseder read: no token broken twice,
    # and the holder's by exactly one of them.
    broken = [e.token for e in store.history(key, limit=100) if e.kind == "broken"]
    assert len(broken) == len(set(broken)) and broken.count(old_token) == 1


def test_the_guard_refuses_a_backfill_and_leaves_the_holder_alone(
        runs: Runs, store: LeaseStore, key: str) -> None:
    today = json.dumps({"logical_date": "2026-12-04T00:00:00+00:00"})
    old = runs.start("today", "--ttl", "3", "--meta", today)
    old_token, _, _, _ = runs.ready("today", old)
    backfill = runs.start("backfill", "--supersede", "--only-newer", "logical_date", "--meta",
                          json.dumps({"logical_date": "2026-11-01T00:00:00+00:00"}))
    assert backfill.wait(timeout=60) == 0
    refused = (runs.out / "backfill.refused").read_text()
    assert "only_newer('logical_date') refused" in refused
    record = store.get(key)
    assert record is not None and record.held and record.token == old_token
    assert old.poll() is None
    assert [e.kind for e in store.history(key)] == ["acquired"]
    tomorrow = runs.start("tomorrow", "--supersede", "--only-newer", "logical_date", "--rows",
                          "1", "--meta", json.dumps({"logical_date": "2026-12-05"}))
    assert tomorrow.wait(timeout=60) == 0
    assert runs.ready("tomorrow", tomorrow)[0] > old_token
    assert old.wait(timeout=30) == LEASE_LOST_EXIT_STATUS


def test_supersede_of_a_free_key_is_a_plain_grant_and_of_its_own_holder_is_refused(
        store: LeaseStore, key: str) -> None:
    lock = LeaseLock(store, key, ttl=5, on_lost="check")
    lease = lock.acquire(supersede=True)
    try:
        with pytest.raises(SupersedeRefused, match="this very process"):
            LeaseLock(store, key, ttl=5).acquire(supersede=True)
    finally:
        lock.release(lease)
    assert [e.kind for e in store.history(key)] == ["acquired", "released"]


def test_the_ready_made_guards() -> None:
    newer = only_newer("logical_date")
    assert newer({"logical_date": "2026-12-04"}, {"logical_date": "2026-12-05T00:00:00Z"})
    assert not newer({"logical_date": "2026-12-04"}, {"logical_date": "2026-12-04"})
    assert not newer({"logical_date": "2026-12-04"}, {"logical_date": "2026-11-30"})
    assert not newer({}, {"logical_date": "2026-12-05"})  # cannot tell: leave it
    assert not newer({"logical_date": 7}, {"logical_date": "2026-12-05"})
    assert only_newer("partition")({"partition": "p0007"}, {"partition": "p0008"})
    assert only_newer("batch")({"batch": 7}, {"batch": 8.5})
    same = only_same("params", "dag_id")
    assert same({"params": {"a": 1}, "dag_id": "d"}, {"params": {"a": 1}, "dag_id": "d"})
    assert not same({"params": {"a": 1}, "dag_id": "d"}, {"params": {"a": 2}, "dag_id": "d"})
    assert not only_same()({}, {})
    lock = LeaseLock(connect("memory://guards"), "k")
    with pytest.raises(ConfigurationError, match="supersede_if must be a callable"):
        lock.hold(supersede=True, supersede_if="newer")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="only applies with supersede=True"):
        lock.acquire(supersede_if=newer)


def test_a_holder_elsewhere_is_superseded_once_its_record_has_expired_on_every_store(
        any_store: LeaseStore, key: str) -> None:
    """Every store breaks on the token, records ``superseded`` and reads it
    back. The holder's meta names another host: nothing here can see it exit,
    so the grant waits for the broken record's own expiry."""
    other = any_store.acquire(key, "elsewhere:7", "secret-elsewhere", 1.0,
                              {"host": "elsewhere", "pid": 7}).record
    assert other is not None
    lock = LeaseLock(any_store, key, ttl=5, on_lost="check", meta={"run": "newest"})
    lease = lock.acquire(supersede=True)
    try:
        assert lease.token > other.token
        after = any_store.get(other.key)
        assert after is not None and after.token == lease.token
        events = any_store.history(key)
        assert [e.kind for e in events] == ["acquired", "broken", "superseded", "acquired"]
        superseded = events[2]
        assert (superseded.token, superseded.holder) == (other.token, "elsewhere:7")
        assert superseded.detail["by"] == lease.holder
        assert superseded.detail["meta"]["run"] == "newest"
        assert events[1].detail["by"] == f"supersede by {lease.holder}"
    finally:
        lock.release(lease)


@pytest.fixture
def any_store(store_url: str) -> Iterator[LeaseStore]:
    s = connect(store_url)
    yield s
    s.close()

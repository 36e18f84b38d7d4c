"""``leasectl run -- CMD``: real ``leasectl`` processes running real commands
(``run_target.py``) on SQLite and Redis: runs that wait never overlap, a
skipped run starts nothing, a break ends the command's whole tree and group
(exit 75), SIGTERM ends the group and gives the lease back at once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_helpers import COMMAND, Leasectl, poll

from lease_integrations import LEASE_LOST_EXIT_STATUS, LeaseStore, connect
from lease_integrations.console.running import BUSY, SKIPPED
from tests.keeper.keeper_observe import Process, alive, identify

TARGET = Path(__file__).with_name("run_target.py")
OTHER = "someone-else:1:00000000000000aa"


@pytest.fixture
def store(cli_url: str) -> Iterator[LeaseStore]:
    s = connect(cli_url)
    yield s
    s.close()


def start(cli_url: str, *args: str) -> subprocess.Popen[str]:
    """``leasectl --url URL run ARGS`` as a process of its own; its stderr goes
    to a file (``finish`` reads it): a pipe would stay open as long as any
    process the command started lives, and reading it would wait for them."""
    env = {k: v for k, v in os.environ.items() if k != "LEASE_STORE_URL"}
    fd, name = tempfile.mkstemp(prefix="leasectl-run-", suffix=".err")
    try:
        proc = subprocess.Popen([*COMMAND, "--url", cli_url, "run", *args], env=env, text=True,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=fd)
    finally:
        os.close(fd)
    proc.args = name  # where finish() reads its stderr
    return proc


def finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    code = proc.wait(timeout=120)
    path = Path(str(proc.args))
    err = path.read_text()
    path.unlink()
    return code, err


def report_of(err: str) -> dict[str, object]:
    """The ``--json`` line among stderr's (log lines of the keeper may follow it)."""
    lines = [line for line in err.splitlines() if line.startswith("{")]
    assert len(lines) == 1, err
    report: dict[str, object] = json.loads(lines[0])
    return report


def state(pid: int) -> str | None:
    """The process's state letter (``R``, ``S``, ``T``, ``Z``...), None once gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()[0]


def read_pids(out: Path, proc: subprocess.Popen[str]) -> list[int]:
    def ready() -> list[int] | None:
        if proc.poll() is not None:
            raise AssertionError(f"leasectl run ended early: {finish(proc)}")
        path = out / "pids"
        return [int(p) for p in path.read_text().split()] if path.exists() else None

    pids = poll(ready, 60, "the command to start its processes")
    _SEEN.update((pid, seen) for pid in pids if (seen := identify(pid)) is not None)
    return pids


#: (pid, start time) of each process ``read_pids`` returned, for ``kill_all``.
_SEEN: dict[int, Process] = {}


def kill_all(pids: list[int]) -> None:
    """What is left of the command's processes: each only if it is still the
    process ``read_pids`` saw (pids wrap around in seconds on a busy host,
    and a reused one may be another test's)."""
    for pid in pids:
        seen = _SEEN.get(pid)
        if seen is not None and alive(seen):
            os.kill(pid, signal.SIGKILL)


def test_runs_that_wait_never_overlap_and_their_tokens_rise(
        cli_url: str, key: str, tmp_path: Path) -> None:
    runs = [start(cli_url, "--key", key, "--ttl", "5", "--on-busy", "wait", "--json", "--",
                  sys.executable, str(TARGET), "stamp", str(tmp_path)) for _ in range(3)]
    ended = [finish(proc) for proc in runs]
    assert [code for code, _ in ended] == [0, 0, 0], ended
    lines = [line.split() for line in (tmp_path / "stamps").read_text().splitlines()]
    assert len(lines) == 6
    # Read in the order they were written: each start is followed by its own end.
    for begin, end in zip(lines[::2], lines[1::2], strict=True):
        assert (begin[0], end[0]) == ("start", "end")
        assert begin[1:3] == end[1:3], f"another run wrote between {begin} and {end}"
    tokens = [int(line[1]) for line in lines[::2]]
    assert tokens == sorted(tokens) and len(set(tokens)) == 3
    reports = [report_of(err) for _, err in ended]
    assert sorted(int(str(r["token"])) for r in reports) == tokens
    assert {(r["key"], r["status"], r["exit"]) for r in reports} == {(key, "ran", 0)}


def test_a_busy_key_starts_nothing_and_exits_with_its_status(
        store: LeaseStore, cli_url: str, key: str, tmp_path: Path, leasectl: Leasectl) -> None:
    assert store.acquire(key, OTHER, "secret-of-the-other", 30, {"dag_id": "billing"}).granted
    target = [sys.executable, str(TARGET), "marker", str(tmp_path)]
    skipped = leasectl("--url", cli_url, "run", "--key", key, "--json", "--", *target)
    assert skipped.code == SKIPPED, skipped.err
    assert f"skipped: lease {key!r} is held by {OTHER}" in skipped.err
    report = report_of(skipped.err)
    assert (report["status"], report["exit"], report["held_by"]) == ("skipped", SKIPPED, OTHER)
    failed = leasectl("--url", cli_url, "run", "--key", key, "--on-busy", "fail", "--", *target)
    assert failed.code == BUSY and OTHER in failed.err
    assert not (tmp_path / "ran").exists()
    assert [e.kind for e in store.history(key)] == ["acquired"]  # no grant, nothing broken


def test_a_break_ends_the_command_its_tree_and_its_group_then_exits_75(
        cli_url: str, key: str, tmp_path: Path, leasectl: Leasectl) -> None:
    proc = start(cli_url, "--key", key, "--ttl", "6", "--json", "--",
                 sys.executable, str(TARGET), "tree", str(tmp_path))
    pids: list[int] = []
    try:
        pids = read_pids(tmp_path, proc)
        broke = leasectl("--url", cli_url, "break", key, "--yes", "--by", "oncall")
        assert broke.code == 0, broke.err
        code, err = finish(proc)
        assert code == LEASE_LOST_EXIT_STATUS, err
        report = report_of(err)
        assert (report["status"], report["exit"]) == ("lost", LEASE_LOST_EXIT_STATUS)
        # When leasectl has exited, no process of the command's can run: each is
        # gone, dead or frozen (the ladder's shell ends the frozen ones next).
        assert {pid: state(pid) for pid in pids if state(pid) not in (None, "Z", "T")} == {}
        poll(lambda: all(state(pid) in (None, "Z") for pid in pids), 30,
             "every process of the command to end")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        kill_all(pids)


def test_sigterm_ends_the_group_and_gives_the_lease_back_at_once(
        store: LeaseStore, cli_url: str, key: str, tmp_path: Path) -> None:
    proc = start(cli_url, "--key", key, "--ttl", "60", "--",
                 sys.executable, str(TARGET), "tree", str(tmp_path))
    pids: list[int] = []
    try:
        pids = read_pids(tmp_path, proc)
        proc.send_signal(signal.SIGTERM)
        code, err = finish(proc)
        assert code == 128 + signal.SIGTERM, err  # the command's own end, passed through
        assert {pid: state(pid) for pid in pids if state(pid) not in (None, "Z")} == {}
        # Given back, not left to its 60 s ttl: the next holder gets it at once.
        assert store.acquire(key, OTHER, "secret-of-the-other", 30, {}).granted
        assert [e.kind for e in store.history(key)] == ["acquired", "released", "acquired"]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        kill_all(pids)


def test_sigterm_while_waiting_for_the_lease_runs_nothing(
        store: LeaseStore, cli_url: str, key: str, tmp_path: Path) -> None:
    assert store.acquire(key, OTHER, "secret-of-the-other", 30, {}).granted
    proc = start(cli_url, "--key", key, "--on-busy", "wait", "--json", "--",
                 sys.executable, str(TARGET), "marker", str(tmp_path))
    poll(lambda: any(e.kind == "acquired" for e in store.history(key)) and proc.poll() is None
         and _waiting(proc.pid), 60, "leasectl to wait for the lease")
    proc.send_signal(signal.SIGTERM)
    code, err = finish(proc)
    assert code == 128 + signal.SIGTERM, err
    assert report_of(err)["status"] == "interrupted"
    assert not (tmp_path / "ran").exists()


def _waiting(pid: int) -> bool:
    """Whether leasectl has installed its own SIGTERM handler (it then waits):
    bit 15 of its caught-signal mask in /proc."""
    with open(f"/proc/{pid}/status") as f:
        caught = next(line for line in f if line.startswith("SigCgt:")).split()[1]
    return bool(int(caught, 16) & (1 << (signal.SIGTERM - 1)))


def test_supersede_ends_the_holder_and_its_tree_before_the_new_command_starts(
        store: LeaseStore, cli_url: str, key: str, tmp_path: Path, leasectl: Leasectl) -> None:
    proc = start(cli_url, "--key", key, "--ttl", "3", "--meta", "day=2026-12-04", "--json", "--",
                 sys.executable, str(TARGET), "tree", str(tmp_path))
    pids: list[int] = []
    try:
        pids = read_pids(tmp_path, proc)
        old_token = store.get(key).token  # type: ignore[union-attr]
        backfill = leasectl("--url", cli_url, "run", "--key", key, "--on-busy", "supersede",
                            "--only-newer", "day", "--meta", "day=2026-11-30", "--",
                            sys.executable, str(TARGET), "alive", str(tmp_path))
        assert backfill.code == BUSY and "not superseded" in backfill.err, backfill
        assert proc.poll() is None and not (tmp_path / "alive").exists()
        newer = leasectl("--url", cli_url, "run", "--key", key, "--on-busy", "supersede",
                         "--only-newer", "day", "--meta", "day=2026-12-05", "--json", "--",
                         sys.executable, str(TARGET), "alive", str(tmp_path))
        assert newer.code == 0, newer.err
        assert (tmp_path / "alive").read_text() == "none"  # none of the old tree ran on
        assert int(str(report_of(newer.err)["token"])) > old_token
        code, err = finish(proc)
        assert code == LEASE_LOST_EXIT_STATUS, err
        # The history names the supersede, and so does the old holder's reason.
        broken = [e for e in store.history(key, limit=50)
                  if e.kind == "broken" and e.token == old_token]
        assert broken and "supersede by" in str(broken[-1].detail.get("by")), broken
        assert "broken by supersede by" in str(report_of(err)["reason"]), err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        kill_all(pids)


@pytest.mark.parametrize("args, code, words", [
    ((), 2, "needs a command"),
    (("--meta", "no-equals", "--", "true"), 2, "--meta"),
    (("--ttl", "soon", "--", "true"), 2, "--ttl"),
    (("--wait-timeout", "5", "--", "true"), 2, "--wait-timeout only applies"),
    (("--only-newer", "day", "--", "true"), 2, "only apply with --on-busy supersede"),
    (("--on-busy", "supersede", "--only-same", "day", "--", "true"), 2, "--meta day"),
    (("--", "no-such-command-here"), 127, "not found"),
])
def test_bad_input_fails_before_any_lease_is_taken(
        store: LeaseStore, cli_url: str, key: str, leasectl: Leasectl,
        args: tuple[str, ...], code: int, words: str) -> None:
    result = leasectl("--url", cli_url, "run", "--key", key, *args)
    assert result.code == code and words in result.err, result
    assert store.get(key) is None


@pytest.mark.parametrize("args, code, words", [
    ((), 2, "needs a command"),
    (("--meta", "no-equals", "--", "true"), 2, "--meta"),
    (("--on-busy", "fail", "--wait-timeout", "5", "--", "true"), 2, "--wait-timeout"),
    (("--", "no-such-command-here"), 127, "not found"),
])
def test_bad_input_is_named_before_the_store_is_opened_and_never_its_password(
        leasectl: Leasectl, args: tuple[str, ...], code: int, words: str) -> None:
    """Nothing listens on port 1: the store would fail (exit 3), so the
    answer shows the input was judged first; the password never shows."""
    result = leasectl("--url", "redis://:hunter2-secret@127.0.0.1:1/0", "run", "--key", "k",
                      *args)
    assert result.code == code and words in result.err, result
    assert "hunter2" not in result.err + result.out

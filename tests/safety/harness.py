"""Runs one fault scenario: spawns workers, injects faults, samples the
store's counter, and hands everything to the checker."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from history import EventLog, Verdict, check, read_events

from lease_integrations import LeaseError, SqlFence, connect
from lease_integrations.core.checker import FencedWrite, check_history
from lease_integrations.core.store import HISTORY_LIMIT

WORKER = Path(__file__).with_name("worker.py")


class Scenario:
    def __init__(self, tmp_path: Path, url: str, name: str) -> None:
        self.dir = tmp_path / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.url = url
        self.key = f"safety-{name}-{uuid.uuid4().hex[:8]}"
        self.ledger = self.dir / "resource.db"
        with sqlite3.connect(self.ledger) as conn:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("CREATE TABLE writes (id INTEGER PRIMARY KEY AUTOINCREMENT, token INT, worker TEXT)")
            SqlFence().create_table(conn)
        self.log = EventLog(self.dir / "harness.jsonl", worker="harness", pid=os.getpid())
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.store = connect(url)
        self.counter_samples: list[int] = []
        self._sampling = threading.Event()
        self._sampler: threading.Thread | None = None
        self.min_ttl: float | None = None  # the shortest ttl any worker used

    # -- workers ----------------------------------------------------------------------
    def spawn(self, worker: str, url: str | None = None, **options: Any) -> subprocess.Popen[bytes]:
        cmd = [sys.executable, str(WORKER), "--url", url or self.url, "--key", self.key,
               "--worker", worker, "--log", str(self.dir / f"{worker}.jsonl"),
               "--ledger", str(self.ledger)]
        for name, value in options.items():
            cmd += [f"--{name.replace('_', '-')}", str(value)]
        ttl = float(options.get("ttl", 2.0))  # worker.py's default
        self.min_ttl = ttl if self.min_ttl is None else min(self.min_ttl, ttl)
        proc = subprocess.Popen(cmd)
        self.procs[worker] = proc
        return proc

    def events(self) -> list[dict[str, Any]]:
        return read_events(sorted(self.dir.glob("*.jsonl")))

    def wait_for(self, predicate: Callable[[list[dict[str, Any]]], Any], timeout: float,
                 what: str) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            found = predicate(self.events())
            if found:
                return found
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout} s waiting for {what}")
            time.sleep(0.02)

    def first(self, worker: str, ev: str, **match: Any) -> Callable[[list[dict[str, Any]]], Any]:
        def find(events: list[dict[str, Any]]) -> dict[str, Any] | None:
            for e in events:
                same = e.get("worker") == worker and e["ev"] == ev
                if same and all(e.get(k) == v for k, v in match.items()):
                    return e
            return None
        return find

    def join(self, timeout: float = 120) -> None:
        for proc in self.procs.values():
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                with_suppressed(os.kill, proc.pid, signal.SIGCONT)
                proc.kill()
                proc.wait()

    # -- faults -------------------------------------------------------------------------
    def kill(self, worker: str) -> int:
        proc = self.procs[worker]
        t = time.monotonic_ns()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        self.log.write("killed", target=proc.pid, victim=worker, at=t)
        return t

    def pause(self, worker: str, until: Callable[[], bool], timeout: float) -> None:
        """SIGSTOP the worker until ``until()`` holds (bounded), then SIGCONT.

        The stop lands between the worker's ledger writes: the harness holds
        the ledger's write lock until the stop has taken effect. A worker
        stopped inside its write transaction would keep that lock, and no
        other worker could write to the ledger until it resumed."""
        proc = self.procs[worker]
        deadline = time.monotonic() + timeout
        ledger = sqlite3.connect(self.ledger, isolation_level=None, timeout=timeout)
        try:
            ledger.execute("BEGIN IMMEDIATE")  # waits for a write in progress to end
            start = time.monotonic_ns()
            os.kill(proc.pid, signal.SIGSTOP)
            try:
                _wait_until_stopped(proc.pid, deadline)
                ledger.execute("ROLLBACK")
                while not until():
                    if time.monotonic() > deadline:
                        raise AssertionError(f"condition not reached while {worker} was paused")
                    time.sleep(0.02)
            finally:
                end = time.monotonic_ns()
                os.kill(proc.pid, signal.SIGCONT)
                self.log.write("paused", target=proc.pid, victim=worker, **{"from": start, "to": end})
        finally:
            ledger.close()

    def cut_off(self, worker: str, start: int, end: int) -> None:
        self.log.write("cut_off", target=self.procs[worker].pid, victim=worker, **{"from": start, "to": end})

    # -- rule 4: the store's counter over time --------------------------------------------
    def start_sampling(self, interval: float = 0.05) -> None:
        def sample() -> None:
            while not self._sampling.wait(interval):
                try:
                    record = self.store.get(self.key)
                except LeaseError:
                    continue  # the server may be down on purpose
                if record is not None:
                    self.counter_samples.append(record.token)
        self._sampler = threading.Thread(target=sample, daemon=True)
        self._sampler.start()

    def verdict(self) -> Verdict:
        self._sampling.set()
        if self._sampler is not None:
            self._sampler.join(timeout=10)
        with sqlite3.connect(self.ledger) as conn:
            accepted = [row[0] for row in conn.execute("SELECT token FROM writes ORDER BY id")]
        record = self.store.get(self.key)
        verdict = check(self.events(), accepted, self.counter_samples,
                        record.token if record else None)
        # The store's own history of the key, as a user would check it: no
        # grant before the previous lease could have expired (on the store's
        # clock; 50 ms for the event stamp against the expiry arithmetic).
        verdict.store_report = check_history(
            self.store.history(self.key, HISTORY_LIMIT), [FencedWrite(t, True) for t in accepted],
            ttl=self.min_ttl, drift=0.05, key=self.key, history_limit=HISTORY_LIMIT)
        return verdict

    def close(self) -> None:
        self.stop_all()
        self._sampling.set()
        self.store.close()


def _wait_until_stopped(pid: int, deadline: float) -> None:
    """Poll until every thread of ``pid`` is stopped (or it has exited):
    kill() returns before a SIGSTOP takes effect on another core."""
    while not _stopped(pid):
        if time.monotonic() > deadline:
            raise AssertionError(f"process {pid} did not stop")
        time.sleep(0.001)


def _stopped(pid: int) -> bool:
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return True
    for task in tasks:
        try:
            stat = Path(f"/proc/{pid}/task/{task}/stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue  # the thread ended
        if stat.rpartition(")")[2].split()[0] not in ("T", "t", "Z", "X"):
            return False
    return True


def with_suppressed(fn: Callable[..., Any], *args: Any) -> None:
    with contextlib.suppress(OSError):
        fn(*args)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")

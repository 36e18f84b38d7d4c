"""Connections for the PostgreSQL store: a small pool that survives server
restarts and forks, and a watchdog that bounds every call on the client.

Why a client-side bound: ``statement_timeout`` is enforced by the server, so a
server that hangs (SIGSTOP, a frozen VM) never answers it, and TCP keepalives
are answered by the server's kernel. The watchdog shuts the socket down when a
call overruns, libpq sees EOF, and the call fails instead of hanging.
"""

from __future__ import annotations

import heapq
import itertools
import os
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

#: Connections a forked child inherited. Never closed (closing would end the
#: parent's session through the shared socket) and never garbage-collected.
_INHERITED: list[Any] = []


#: The longest the watchdog sleeps while calls run. A call's deadline is
#: further away than this (statement_timeout + 1 s), so a call that starts
#: while the thread keeps time need not wake it: waking it on every call cost
#: a thread switch per statement, a tenth of a fast acquire. Only the first
#: call after an idle spell (a whole IDLE_WAKE without a call) wakes it.
IDLE_WAKE = 0.5


class Watchdog:
    """One thread per process: shuts down the socket of a call that overran."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int]] = []
        self._calls: dict[int, tuple[float, int]] = {}  # id -> (deadline, fileno)
        self._fired: set[int] = set()
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None
        self._wake_at = 0.0  # when the thread wakes next on its own
        self._started = 0  # calls guarded so far

    @contextmanager
    def guard(self, fileno: int, timeout: float) -> Iterator[Callable[[], bool]]:
        """Bound the block to ``timeout`` seconds; yields ``fired()``, true
        when the watchdog cut the connection."""
        call = self.start(fileno, timeout)
        try:
            yield lambda: call in self._fired
        finally:
            self.stop(call)

    def start(self, fileno: int, timeout: float) -> int:
        """``guard`` without the context manager, for the hot calls: returns
        the call's id for ``stop``."""
        call = next(self._ids)
        deadline = time.monotonic() + timeout
        with self._cond:
            self._calls[call] = (deadline, fileno)
            heapq.heappush(self._heap, (deadline, call))
            self._started += 1
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="lease-pg-watchdog",
                                                daemon=True)
                self._thread.start()
            if deadline < self._wake_at:
                self._cond.notify()  # wake the watchdog only when it must wake sooner
        return call

    def stop(self, call: int) -> bool:
        """End the call's bound; true when the watchdog had cut it. After
        this, the watchdog can no longer touch the socket."""
        with self._cond:
            self._calls.pop(call, None)
            if call in self._fired:
                self._fired.discard(call)
                return True
            return False

    def _run(self) -> None:
        seen = -1
        with self._cond:
            while True:
                while self._heap and self._heap[0][1] not in self._calls:
                    heapq.heappop(self._heap)
                now = time.monotonic()
                if not self._heap:
                    if self._started == seen:  # no call for a whole spell: sleep
                        self._wake_at = float("inf")  # until a call wakes the thread
                        self._cond.wait()
                        continue
                    seen = self._started
                delay = min(self._heap[0][0] - now if self._heap else IDLE_WAKE, IDLE_WAKE)
                if delay > 0:
                    self._wake_at = now + delay
                    self._cond.wait(delay)
                    continue
                _, call = self._heap[0]
                heapq.heappop(self._heap)
                _, fileno = self._calls.pop(call)
                self._fired.add(call)
                _shutdown(fileno)


def _shutdown(fileno: int) -> None:
    try:
        sock = socket.socket(fileno=os.dup(fileno))
    except OSError:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        sock.close()  # closes only the duplicate descriptor


_watchdog_lock = threading.Lock()
_watchdog: tuple[int, Watchdog] | None = None


def watchdog() -> Watchdog:
    global _watchdog
    current = _watchdog
    if current is not None and current[0] == os.getpid():  # every call after the first
        return current[1]
    with _watchdog_lock:
        if _watchdog is None or _watchdog[0] != os.getpid():
            _watchdog = (os.getpid(), Watchdog())
        return _watchdog[1]


class Pool:
    """Idle autocommit connections, one borrowed per call, so the heartbeat's
    worker threads renew while another thread acquires.

    A connection that failed is dropped, not reused; an idle one whose socket
    became readable (the server said goodbye or closed it: a restart) is
    dropped before use, so a restart costs no failed call. In a forked child
    the parent's connections are left alone and new ones are made.
    """

    def __init__(self, connect: Callable[[], Any], max_idle: int = 4) -> None:
        self._connect = connect
        self._max_idle = max_idle
        self._idle: list[Any] = []
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def _check_fork(self) -> None:
        if self._pid != os.getpid():
            with self._lock:
                _INHERITED.extend(self._idle)
                self._idle, self._pid = [], os.getpid()

    def _take(self) -> Any:
        self._check_fork()
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return self._connect()
            if conn.closed or conn.broken or _readable(conn.fileno()):
                _close(conn)
                continue
            return conn

    @contextmanager
    def connection(self) -> Iterator[Any]:
        conn = self._take()
        try:
            yield conn
        except BaseException:
            _close(conn)  # we do not know what state a failed call left it in
            raise
        self.give(conn)

    def take(self) -> Any:
        """A connection for one call, without the context manager (the hot
        calls): hand it back with ``give`` after a success, ``discard`` it
        after a failure."""
        return self._take()

    def give(self, conn: Any) -> None:
        with self._lock:
            if len(self._idle) < self._max_idle and self._pid == os.getpid() \
                    and not conn.broken:
                self._idle.append(conn)
                return
        _close(conn)

    @staticmethod
    def discard(conn: Any) -> None:
        _close(conn)

    def close(self) -> None:
        """Close the idle connections; a later call opens a new one."""
        self._check_fork()
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            _close(conn)


def _readable(fileno: int) -> bool:
    try:
        ready, _, _ = select.select([fileno], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(ready)


def _close(conn: Any) -> None:
    with suppress(Exception):
        conn.close()

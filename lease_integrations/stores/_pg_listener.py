"""LISTEN/NOTIFY for the PostgreSQL store: one dedicated connection per store
object (and process), read by a daemon thread that remembers when each key
was last released, so a waiter also sees a release that happened between its
failed acquire and its call to ``wait``."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from ._pg_pool import watchdog

log = logging.getLogger("lease_integrations")

#: How long the thread blocks reading notifications before checking for close.
READ_SLICE = 0.5
#: Forget release times older than this (a waiter only asks about recent ones).
REMEMBER = 300.0


class Listener:
    """Listens on one channel whose payloads are lease keys."""

    def __init__(self, connect: Callable[[], Any], listen_sql: str, call_timeout: float) -> None:
        self._connect = connect
        self._listen_sql = listen_sql
        self._call_timeout = call_timeout
        self._cond = threading.Condition()
        self._released: dict[str, float] = {}  # key -> monotonic time of the last notify
        self._epoch = 0  # bumped on every (re)connect: notifications may have been missed
        self.listening_since: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lease-pg-listen", daemon=True)
        self._thread.start()

    def wait_listening(self, timeout: float) -> float | None:
        """Wait until LISTEN is active; returns since when (monotonic) or None."""
        with self._cond:
            self._cond.wait_for(lambda: self.listening_since is not None, timeout)
            return self.listening_since

    def wait(self, key: str, since: float, timeout: float) -> bool:
        """True once ``key`` was released after ``since`` (or the connection
        was re-made, so a release may have gone unheard); False on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            epoch = self._epoch
            while True:
                if self._released.get(key, -1.0) >= since or self._epoch != epoch:
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)

    def close(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        pause = 0.1
        while not self._stop.is_set():
            conn = None
            try:
                conn = self._connect()
                with watchdog().guard(conn.fileno(), self._call_timeout):
                    conn.execute(self._listen_sql)
                with self._cond:
                    self.listening_since = time.monotonic()
                    self._epoch += 1
                    self._cond.notify_all()
                pause = 0.1
                while not self._stop.is_set():
                    for note in conn.notifies(timeout=READ_SLICE):
                        self._heard(note.payload)
            except Exception as exc:
                log.debug("lease LISTEN connection failed, retrying: %s", exc)
            finally:
                with self._cond:
                    self.listening_since = None
                if conn is not None:
                    with suppress(Exception):
                        conn.close()
            self._stop.wait(pause)
            pause = min(pause * 2, 2.0)

    def _heard(self, key: str) -> None:
        now = time.monotonic()
        with self._cond:
            self._released[key] = now
            if len(self._released) > 10_000:
                self._released = {k: t for k, t in self._released.items() if now - t < REMEMBER}
            self._cond.notify_all()

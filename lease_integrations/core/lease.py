"""The holder's side of a granted lease: its token, its trust window and the
loss flag that every policy (exit, check, cancel, callbacks) reads."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

from . import metrics
from .clock import now
from .errors import LeaseLost
from .record import LeaseRecord

log = logging.getLogger("lease_integrations")

LostCallback = Callable[["Lease"], None]
#: What ends the process when a fail-stop block's lease is lost: the lease,
#: its callbacks, work begun before (``keeper.failstop.stop_process``).
Stopper = Callable[["Lease", "list[LostCallback]", object], None]


class LostFlag:
    """Whether the lease is lost: ``is_set()``, ``wait(timeout)`` and ``set()``
    as on a ``threading.Event``, and falsy until set, so ``if lease.lost:``
    reads naturally (a plain Event is always truthy, a silent bug there).
    The Event behind ``wait`` is made only when someone waits: most leases
    are never waited on, and an Event (a Condition and two locks) is the
    dearest part of making a lease."""

    __slots__ = ("_event", "_set")

    def __init__(self) -> None:
        self._set = False
        self._event: threading.Event | None = None

    def is_set(self) -> bool:
        return self._set

    __bool__ = is_set

    def set(self) -> None:
        with _flags:
            self._set = True
            event = self._event
        if event is not None:
            event.set()

    def wait(self, timeout: float | None = None) -> bool:
        if self._set:
            return True
        with _flags:
            if self._set:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)

    def __repr__(self) -> str:
        return f"<LostFlag {'set' if self._set else 'unset'}>"


_flags = threading.Lock()  # guards LostFlag's first wait against its set


class Lease:
    """A lease this process holds (or held).

    The holder trusts the lease only until *start of its last successful
    renewal attempt + ttl - margin*, measured on ``clock.now()``: the
    store cannot have expired it before then, whatever either wall clock says.
    Past that instant without a renewal the lease is lost *locally*, before the
    store can give it to anyone else.
    """

    def __init__(
        self,
        record: LeaseRecord,
        *,
        ttl: float,
        margin: float,
        attempt_started: float,
        secret: str = "",
        grace: float = 0.0,
    ) -> None:
        if record.holder is None:
            raise ValueError("a granted lease must have a holder")
        self.record = record
        self.key: str = record.key
        self.holder: str = record.holder
        self.token: int = record.token
        #: The owner secret renew and release present to the store. Never log
        #: or print it; only hand it to a process that adopts this lease.
        self.secret: str = secret
        self.ttl = ttl
        self.margin = margin
        #: Seconds fail-stop gives descendant processes between SIGTERM and SIGKILL.
        self.grace = grace
        #: The process that holds the lease: a forked child never renews or releases it.
        self.pid = os.getpid()
        #: Set while a ``hold()`` block with ``on_lost="exit"`` runs: a loss then
        #: ends the process (``failstop``) instead of only running the callbacks.
        self.fail_stop = False
        self._stopper: Stopper | None = None
        self.meta: dict[str, Any] = dict(record.meta)
        self.lost = LostFlag()
        self.lost_reason: str | None = None
        self.released = False
        #: ``now()`` when the granting attempt started.
        self.attempt_started = attempt_started
        self._trusted_until = attempt_started + ttl - margin
        self._callbacks: list[LostCallback] = []
        self._mutex = threading.Lock()
        #: What renews it: the keeper or the in-process heartbeat (``remove``).
        self.kept_by: Any = None
        #: The keeper's id for it, and how to read the keeper's latest word.
        self.keeper_id = 0
        self.sync: Callable[[], None] | None = None
        #: When the keeper stops the job for this loss (its ladder's deadline).
        self.stop_at: float | None = None
        #: Continued from another process (``adopt``): the run it belongs to goes
        #: on elsewhere, so this holder's death leaves it to its ttl, unreleased.
        self.adopted = False

    # -- what users read --------------------------------------------------
    @property
    def acquired_at(self) -> datetime | None:
        return self.record.acquired_at

    @property
    def expires_at(self) -> datetime | None:
        return self.record.expires_at

    def trusted_for(self) -> float:
        """Seconds the holder may still count on the lease (0 once lost)."""
        if self.lost.is_set() or self.released:
            return 0.0
        return max(0.0, self._trusted_until - now())

    def check(self) -> None:
        """Raise ``LeaseLost`` if the lease is lost, or if its trust window has
        closed even though the heartbeat has not noticed yet (a paused process
        wakes up here, not inside its next write)."""
        if not self.lost.is_set() and not self.released and self.window_closed():
            self.mark_lost("trust window closed without a successful renewal")
        if self.lost.is_set():
            raise LeaseLost(self.key, self.token, self.lost_reason or "")

    def window_closed(self) -> bool:
        """Whether the trust window has closed. A job that was too busy to
        read its keeper's reports reads them first: the keeper may well have
        renewed the lease meanwhile."""
        at = now()
        if at < self._trusted_until:
            return False
        if self.sync is not None:  # all it said before ``at`` is in the pipe now
            self.sync()
        # Judged at ``at``, not after the reading: a job whose threads crowd
        # the GIL may take seconds to read, and the window is about ``at``.
        return at >= self._trusted_until

    def on_lost(self, callback: LostCallback) -> None:
        """Run ``callback(lease)`` once when the lease is lost (at once if it
        already is). Callbacks run on a heartbeat worker thread: keep them short."""
        with self._mutex:
            if not self.lost.is_set():
                self._callbacks.append(callback)
                return
        _run_callback(callback, self)

    # -- what the heartbeat and the lock call -------------------------------
    def renewed(self, attempt_started: float) -> None:
        """A renewal that started at ``attempt_started`` succeeded."""
        with self._mutex:
            if not self.lost.is_set():
                self._trusted_until = max(
                    self._trusted_until, attempt_started + self.ttl - self.margin
                )

    @property
    def trusted_until(self) -> float:
        return self._trusted_until

    def mark_lost(self, reason: str, before_callbacks: Callable[[], object] | None = None) -> bool:
        """Set the loss flag and run the callbacks, or, while a fail-stop block
        runs, end the process (the callbacks are one step of that). Returns
        False if the lease was already lost or released (loss is reported once).

        ``before_callbacks`` runs first: whatever must not be lost when the
        process ends (recording the loss in the store's history) starts there;
        if it returns a ``Future``, fail-stop waits for it (bounded)."""
        with self._mutex:
            if self.lost.is_set() or self.released:
                return False
            self.lost_reason = reason
            try:  # before the flag: whoever sees it lost sees it counted
                metrics.lost(self.key)
            except Exception:  # a broken meter must not hide the loss
                log.exception("recording the loss of lease %s failed", self.key)
            self.lost.set()
            callbacks, self._callbacks = self._callbacks, []
            stop = self._stopper if self.fail_stop and self.pid == os.getpid() else None
        if stop is None:  # the ladder's own first line says it, once
            self._log_loss(reason)
        started = before_callbacks() if before_callbacks is not None else None
        if stop is not None:
            stop(self, callbacks, started)
        for callback in callbacks:
            _run_callback(callback, self)
        return True

    def renew_failed(self, error: str, error_type: str) -> None:
        """A renewal failed and will be retried (counted and logged here, in
        the holding process, wherever the renewal ran)."""
        metrics.renew_failed(self.key, error_type)
        log.warning(
            "renewal of lease %s (token %s) failed, will retry: %s", self.key, self.token, error,
            extra={"lease_event": "renew_failed", "lease_key": self.key,
                   "lease_token": self.token, "lease_holder": self.holder},
        )

    def _log_loss(self, reason: str) -> None:
        log.warning(
            "lease %s lost (token %s, holder %s): %s", self.key, self.token, self.holder, reason,
            extra={"lease_event": "lost", "lease_key": self.key, "lease_token": self.token,
                   "lease_holder": self.holder},
        )

    def mark_released(self) -> None:
        with self._mutex:
            self.released = True
            self.fail_stop = False
            self._callbacks = []

    def arm_fail_stop(self, stopper: Stopper) -> bool:
        """A block with ``on_lost="exit"`` begins: from now a loss ends the
        process, through ``stopper`` (the ladder: it lives with the lease's
        lifetime, not with its data). False if the lease is lost already
        (the block must not run)."""
        with self._mutex:
            self._stopper = stopper
            self.fail_stop = not self.lost.is_set()
            return self.fail_stop

    def disarm(self) -> None:
        """The block is leaving: a loss from now on no longer ends the process."""
        with self._mutex:
            self.fail_stop = False

    def __repr__(self) -> str:
        state = "lost" if self.lost.is_set() else "released" if self.released else "held"
        return f"<Lease key={self.key!r} token={self.token} holder={self.holder!r} {state}>"


def _run_callback(callback: LostCallback, lease: Lease) -> None:
    try:
        callback(lease)
    except Exception:  # a user's callback must not kill the heartbeat
        log.exception("on_lost callback %r for lease %s raised", callback, lease.key)

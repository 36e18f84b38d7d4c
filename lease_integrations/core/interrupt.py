"""The ``interrupt`` loss policy: raise ``LeaseLost`` inside the code that runs
the protected block, wherever it is.

In the main thread a real signal is sent to the thread itself, so the
exception arrives even while it is blocked in ``time.sleep`` or a socket read
(the system call returns EINTR and Python runs our handler, which raises).
Other threads cannot be signalled that way in Python; they get the exception
asynchronously at their next bytecode (``PyThreadState_SetAsyncExc``), which
does not cut a blocking call short. Asyncio code is cancelled instead (see
``lock.hold_async``).
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading
from types import FrameType
from typing import Any

from .errors import LeaseLost
from .lease import Lease

#: The signal used to wake the main thread. SIGUSR1 is rarely claimed by job
#: code; a handler that was there before is still called for signals not ours.
INTERRUPT_SIGNAL = signal.SIGUSR1 if hasattr(signal, "SIGUSR1") else None

_registry_lock = threading.Lock()
_pending: list[LeaseLost] = []
_armed: list[MainThreadInterrupt] = []
_previous_handler: Any = None


def _handler(signum: int, frame: FrameType | None) -> None:
    with _registry_lock:
        error = _pending.pop(0) if _pending else None
    if error is not None:
        raise error
    previous = _previous_handler
    if callable(previous):
        previous(signum, frame)
    elif previous in (None, signal.SIG_DFL):
        # Not ours, and nobody handled it before us: do what the default would.
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def _install_handler() -> None:
    """Install the handler once and leave it (it chains to whatever was there):
    installing and restoring it around every hold cost two system calls per
    lease. Reinstalled if someone replaced it since."""
    global _previous_handler
    assert INTERRUPT_SIGNAL is not None
    current = signal.getsignal(INTERRUPT_SIGNAL)
    if current is not _handler:
        _previous_handler = current
        signal.signal(INTERRUPT_SIGNAL, _handler)


class Interrupter:
    """Armed while the protected block runs; ``fire`` raises there."""

    def fire(self, lease: Lease) -> None:
        raise NotImplementedError

    def disarm(self) -> None:
        """Stop interrupting. A ``LeaseLost`` already on its way may land while
        we disarm; it is swallowed and disarming finishes, since the caller is
        leaving the protected block anyway (and checks the loss flag itself)."""
        while True:
            try:
                self._disarm()
                return
            except LeaseLost:
                continue

    def _disarm(self) -> None:
        raise NotImplementedError


class MainThreadInterrupt(Interrupter):
    def __init__(self) -> None:
        self._armed = True
        with _registry_lock:
            _install_handler()
            _armed.append(self)

    def fire(self, lease: Lease) -> None:
        with _registry_lock:
            if not self._armed:
                return
            _pending.append(LeaseLost(lease.key, lease.token, lease.lost_reason or ""))
        assert INTERRUPT_SIGNAL is not None
        signal.pthread_kill(threading.main_thread().ident or 0, INTERRUPT_SIGNAL)

    def _disarm(self) -> None:
        with _registry_lock:
            if not self._armed:
                return
            self._armed = False
            _armed.remove(self)
            if not _armed:
                _pending.clear()


class ThreadInterrupt(Interrupter):
    def __init__(self, thread_id: int) -> None:
        self._thread_id = thread_id
        self._armed = True
        self._mutex = threading.Lock()

    def fire(self, lease: Lease) -> None:
        with self._mutex:
            if not self._armed:
                return
            error_type = _bound_lease_lost(lease)
            ctypes.pythonapi.PyThreadState_SetAsyncExc(
                ctypes.c_ulong(self._thread_id), ctypes.py_object(error_type)
            )

    def _disarm(self) -> None:
        with self._mutex:
            if self._armed:
                self._armed = False
                # Withdraw an exception fired but not yet delivered.
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._thread_id), None)


def _bound_lease_lost(lease: Lease) -> type[LeaseLost]:
    """An async exception is raised by type, without arguments: bake them in."""
    key, token, reason = lease.key, lease.token, lease.lost_reason or ""

    def __init__(self: LeaseLost) -> None:
        LeaseLost.__init__(self, key, token, reason)

    return type("LeaseLost", (LeaseLost,), {"__init__": __init__})


def interrupter_for_current_thread() -> Interrupter:
    if threading.current_thread() is threading.main_thread() and INTERRUPT_SIGNAL is not None:
        return MainThreadInterrupt()
    return ThreadInterrupt(threading.get_ident())

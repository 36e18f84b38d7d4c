"""Loss delivery: how a lost lease stops the code that runs its block.

Each ``hold()`` block arms a ``Block`` on the thread that runs it (a stack per
thread: holds nest). When the heartbeat declares the lease lost, ``fire``
marks the block pending and raises the block's own ``LeaseInterrupted`` there:

- main thread: a real signal (SIGUSR1 unless configured) to the main thread,
  so the exception also cuts a ``time.sleep`` or a socket read short. The
  handler takes no lock (it may run while the main thread is anywhere,
  including inside this module): it only reads the main thread's blocks.
- other threads: ``PyThreadState_SetAsyncExc``, delivered at the thread's next
  bytecode (a blocking call is not cut short).
- a block whose thread runs an asyncio loop (sync ``hold()`` inside a
  coroutine): only the task that entered the block is hit: raised when that
  task is the one running, else the task is cancelled.

Two rules keep an interrupt out of the library's own bookkeeping. While a
thread's *shield* is up (a store call in acquire or release), a loss stays
pending and is delivered when the shield comes down. And frames of functions
marked ``@guarded`` (the enter and exit of a hold) never receive one: the
main thread's handler re-sends the signal so it lands at the next bytecode
outside them, and ``fire`` waits for a worker thread to leave them.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import gc
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any, TypeVar

from .errors import LeaseInterrupted
from .lease import Lease

F = TypeVar("F", bound=Callable[..., Any])

_MAIN = threading.main_thread().ident or 0
_lock = threading.Lock()  # fire and a worker thread's shield; never the signal handler
_threads: dict[int, _Thread] = {}
_guarded: set[CodeType] = set()
_signal: int | None = None
_previous_handler: Any = None
_sent = 0  # signals fire sent (written under _send_lock)
_resent = 0  # signals the handler re-sent (written by the handler only)
_seen = 0  # of those, how many the handler has counted (handler only)
_send_lock = threading.Lock()


def _default_signal() -> int | None:
    name = os.environ.get("LEASE_INTERRUPT_SIGNAL", "SIGUSR1")
    number = int(name) if name.isdigit() else getattr(signal, name.upper(), None)
    return number if isinstance(number, int) and hasattr(signal, "pthread_kill") else None


def set_interrupt_signal(signum: int | None) -> None:
    """Use ``signum`` to interrupt the main thread (``None``: no signal, the
    main thread then gets the interrupt at its next bytecode like any other
    thread). Default SIGUSR1, or ``LEASE_INTERRUPT_SIGNAL`` (a name such as
    ``SIGUSR2`` or a number). Call it before the first hold."""
    global _signal
    _signal = signum


_signal = _default_signal()


class _Thread:
    """One thread's armed blocks (innermost last) and shield depth."""

    __slots__ = ("shield", "stack")

    def __init__(self) -> None:
        self.stack: list[Block] = []
        self.shield = 0


class Block:
    """One armed ``hold()`` block: where and how to deliver its lease's loss."""

    def __init__(self, lease: Lease) -> None:
        self.lease = lease
        self.thread = threading.get_ident()
        self.loop: asyncio.AbstractEventLoop | None
        try:
            self.loop = asyncio.get_running_loop()
            self.task = asyncio.current_task()
        except RuntimeError:
            self.loop, self.task = None, None
        self.stacked = False  # on its thread's stack (sync hold) or not (hold_async)
        self.abandon: Callable[[], object] = lambda: None  # cleanup if its exit was cut short
        self.armed = True
        self.pending = False  # lost, not yet delivered
        self.delivered = False
        self.cancelled = False  # delivered by cancelling self.task
        # An async exception is raised by type: one subclass per block, so the
        # hold knows its own interrupt from another block's.
        self.error: type[LeaseInterrupted] = type(
            "LeaseInterrupted", (LeaseInterrupted,), {"lease": lease, "block": self})


def guarded(func: F) -> F:
    """Never deliver an interrupt while ``func``'s own frame runs."""
    _guarded.add(func.__code__)
    return func


def _state() -> _Thread:
    return _threads.setdefault(threading.get_ident(), _Thread())


@guarded
def shield_up() -> None:
    """Hold losses for this thread pending until ``shield_down``. On a worker
    thread, withdraws an async exception fired but not yet raised (its block
    is marked undelivered, so it is delivered again at ``shield_down``)."""
    state = _state()
    if threading.get_ident() == _MAIN and _signal is not None:
        state.shield += 1
        return
    with _lock:
        state.shield += 1
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(threading.get_ident()), None)
        for block in state.stack:
            if block.task is None:
                block.delivered = False


@guarded
def shield_down() -> Block | None:
    """Lower the shield; returns a block whose loss is waiting for delivery
    (the caller delivers it with ``deliver`` once its own bookkeeping is done)."""
    state = _state()
    with _lock:
        state.shield -= 1
        if state.shield == 0 and not state.stack:
            _threads.pop(threading.get_ident(), None)
        return _deliverable(state)


@guarded
def depth(restore: int | None = None) -> int:
    """This thread's shield depth; with ``restore``, set it back first."""
    if restore is not None:
        _state().shield = restore
    state = _threads.get(threading.get_ident())
    return state.shield if state is not None else 0


@guarded
def lower() -> None:
    """``shield_down`` and deliver what waited (when nothing is held)."""
    pending = shield_down()
    if pending is not None:
        deliver(pending)


def shielded(func: F) -> F:
    """Run ``func`` with this thread's shield up (every store method is): an
    interrupt landing at the bytecode after a query returned would otherwise
    leave a transaction open or a connection mid-reply, a write lock held
    for every other connection. The loss is delivered as the call returns."""

    def call(*args: Any, **kwargs: Any) -> Any:
        if threading.get_ident() not in _threads:  # nothing armed on this thread
            return func(*args, **kwargs)
        shield_up()
        try:
            return func(*args, **kwargs)
        finally:
            lower()

    _guarded.add(call.__code__)
    return functools.wraps(func)(call)  # type: ignore[return-value]


def _deliverable(state: _Thread) -> Block | None:
    if state.shield:
        return None
    for block in reversed(state.stack):
        if block.pending and block.armed and not block.delivered:
            return block
    return None


@guarded
def arm(lease: Lease, *, stacked: bool = True) -> Block:
    """Arm a block for ``lease`` on the calling thread (a sync hold, inside a
    shield) or, with ``stacked=False``, for the calling task (``hold_async``)."""
    global _previous_handler, _previous_unraisable
    block = Block(lease)
    block.stacked = stacked
    if sys.unraisablehook is not _unraisable:
        _previous_unraisable, sys.unraisablehook = sys.unraisablehook, _unraisable
    if stacked:
        if block.thread == _MAIN and _signal is not None and signal.getsignal(_signal) is not _handler:
            _previous_handler = signal.signal(_signal, _handler)
        _state().stack.append(block)
    lease.on_lost(lambda _lease: fire(block))
    return block


@guarded
def disarm(block: Block) -> list[Block]:
    """Disarm ``block`` (inside a shield). Returns the blocks of the same task
    above it on its thread's stack, also disarmed: holds whose exit an
    exception cut short, which the caller still has to release."""
    block.armed = False
    state = _threads.get(block.thread)
    if state is None or block not in state.stack:
        return []
    index = state.stack.index(block)
    above = [inner for inner in state.stack[index + 1:] if inner.task is block.task]
    state.stack[index:] = [inner for inner in state.stack[index + 1:] if inner not in above]
    for inner in above:
        inner.armed = False
    return above


def deliver(block: Block) -> None:
    """Deliver on the block's own thread: raise its interrupt, or cancel its
    task when another task (or none) is running."""
    block.delivered = True
    if block.task is not None and asyncio.current_task(block.loop) is not block.task:
        block.cancelled = True
        block.task.cancel(f"lease {block.lease.key!r} lost")
        if block.loop is not None:  # wake a select() the signal cut short (it is retried)
            with contextlib.suppress(RuntimeError):
                block.loop.call_soon_threadsafe(_nothing)
        return
    raise block.error()


def _nothing() -> None:
    pass


def fire(block: Block) -> None:
    """The lease of ``block`` is lost: deliver it on its thread (from any thread)."""
    block.pending = True
    if threading.get_ident() != block.thread:  # else lease.check() found it: the exit raises
        _send(block)


def _send(block: Block) -> None:
    global _sent
    if block.stacked and block.thread == _MAIN and _signal is not None:
        with _send_lock:
            _sent += 1
        signal.pthread_kill(_MAIN, _signal)
    elif block.task is not None and block.loop is not None:
        with contextlib.suppress(RuntimeError):  # a closed loop: the block is long gone
            block.loop.call_soon_threadsafe(_deliver_from_loop, block)
    else:
        while not _set_async(block):
            time.sleep(0.0005)  # the thread is in a guarded frame: it leaves it at once


def _set_async(block: Block) -> bool:
    """Raise the block's interrupt in its worker thread; False to retry
    (the thread is in a guarded frame with no shield up)."""
    with _lock:
        state = _threads.get(block.thread)
        if state is None or not block.armed or block.delivered or state.shield:
            return True
        if _in_guarded_frame(block.thread):
            return False
        thread = ctypes.c_ulong(block.thread)
        ctypes.pythonapi.PyThreadState_SetAsyncExc(thread, ctypes.py_object(block.error))
        # The thread may have run on into a guarded frame between the check
        # and the raise (it then waits for _lock in shield_up, so the
        # exception has not fired yet): withdraw it and try again later.
        if _in_guarded_frame(block.thread):
            ctypes.pythonapi.PyThreadState_SetAsyncExc(thread, None)
            return False
        block.delivered = True
        return True


def _in_guarded_frame(thread_id: int) -> bool:
    frame = frame_of(thread_id)
    return frame is not None and frame.f_code in _guarded


def frame_of(thread_id: int) -> FrameType | None:
    """The frame ``thread_id`` runs now. ``sys._current_frames()`` holds the
    interpreter's thread-list lock while it allocates; on Python <= 3.11 an
    allocation may run the garbage collector, whose finalizers can hand the
    GIL to a thread that waits for that lock: the process deadlocks
    (CPython gh-106883). With the collector off for the call it cannot."""
    with _frames_lock:  # one caller at a time, so none re-enables it under another
        enabled = gc.isenabled()
        gc.disable()
        try:
            return sys._current_frames().get(thread_id)
        finally:
            if enabled:
                gc.enable()


_frames_lock = threading.Lock()


def _unraisable(info: Any) -> None:
    """An interrupt that landed where Python ignores exceptions (``__del__``, a
    weakref callback): deliver it again, it will land at the next bytecode."""
    block = getattr(type(info.exc_value), "block", None)
    if isinstance(block, Block) and block.armed:
        block.delivered = False
        _send(block)
    else:
        _previous_unraisable(info)


_previous_unraisable = sys.unraisablehook


def _deliver_from_loop(block: Block) -> None:
    # A loop callback: no task runs, so the block's task is suspended inside it.
    if block.armed and not block.delivered:
        deliver(block)


def _handler(signum: int, frame: FrameType | None) -> None:
    """Runs in the main thread between two bytecodes: no locks, no waiting."""
    global _seen, _resent
    ours = _seen < _sent + _resent
    if ours:
        _seen += 1
    state = _threads.get(_MAIN)
    block = _deliverable(state) if state is not None else None
    if block is not None:
        if frame is not None and frame.f_code in _guarded:
            _resent += 1  # land at the next bytecode outside our bookkeeping
            signal.pthread_kill(_MAIN, signum)
            return
        deliver(block)
        return
    previous = _previous_handler
    if not ours and callable(previous):
        previous(signum, frame)
    # Otherwise: ours but late (the block already left), or nobody's: ignore.


def _after_fork() -> None:
    global _MAIN, _lock, _send_lock, _frames_lock
    _MAIN = threading.main_thread().ident or 0
    _lock, _send_lock, _frames_lock = threading.Lock(), threading.Lock(), threading.Lock()
    _threads.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)

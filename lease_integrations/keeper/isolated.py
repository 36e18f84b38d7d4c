"""Work that must end on loss while its caller lives on (a service, a
notebook): it runs in a child process, the only unit CPython can stop safely.
On loss the child and everything it started are ended and the caller gets
``LeaseLost``; the caller's own process is never touched."""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import os
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from ..core.errors import LeaseLost
from ..core.lease import Lease
from .descendants import end_frozen, freeze


class _Lock(Protocol):
    """What of ``LeaseLock`` the runner uses (the lock imports us, not we it)."""

    def acquire(self, wait: float | None = 0) -> Lease: ...

    def _end(self, lease: Lease, release: bool) -> str | None: ...


def run_in_subprocess(lock: _Lock, target: Callable[..., Any], args: tuple[Any, ...],
                      kwargs: Mapping[str, Any], wait: float | None) -> Any:
    """Take the lease, run ``target(*args, **kwargs)`` in a fresh ``spawn``
    child (not a fork: the caller's heartbeat thread and locks must not be
    copied mid-use) and give back its result or raise its exception. The
    child finds the lease's key and token in ``LEASE_KEY`` and ``LEASE_TOKEN``
    (its fencing token). ``target``, its arguments and its result must pickle."""
    lease = lock.acquire(wait)
    spawn = multiprocessing.get_context("spawn")
    receive, send = spawn.Pipe(duplex=False)
    child = spawn.Process(target=_child, args=(send, lease.key, lease.token, target, args,
                                               dict(kwargs)), name=f"leased {lease.key}")
    outcome: tuple[str, Any] | None = None
    try:
        child.start()
        send.close()
        pid = child.pid

        def end_child(_lease: object) -> None:
            end_frozen(freeze(pid), lease.grace)

        lease.on_lost(end_child)
        with contextlib.suppress(EOFError):  # no answer: ended on loss, or crashed
            outcome = receive.recv()
        child.join()
    finally:
        closed = not lease.released and lease.window_closed()
        refused = lock._end(lease, release=True)
        if child.pid is not None and child.exitcode is None:  # the caller was interrupted
            end_frozen(freeze(child.pid), lease.grace)
            child.join()
        receive.close()
    if lease.lost or refused or closed:
        raise LeaseLost(lease.key, lease.token, lease.lost_reason or refused
                        or "the trust window closed before the child finished")
    if outcome is None:
        raise RuntimeError(f"the child process for lease {lease.key!r} ended with exit code "
                           f"{child.exitcode} before it returned")
    kind, value = outcome
    if kind == "error":
        raise value
    return value


def _child(conn: multiprocessing.connection.Connection, key: str, token: int,
           target: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
    os.environ["LEASE_KEY"], os.environ["LEASE_TOKEN"] = key, str(token)
    try:
        result: tuple[str, Any] = ("ok", target(*args, **kwargs))
    except Exception as exc:  # raised again in the caller
        result = ("error", exc)
    try:
        conn.send(result)
    except Exception as exc:  # an unpicklable result or exception
        conn.send(("error", RuntimeError(f"the child's outcome could not be sent back: {exc!r}")))
    conn.close()

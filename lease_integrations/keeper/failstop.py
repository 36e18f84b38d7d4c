"""Fail-stop: a ``hold()`` block whose lease is lost ends the process running it.

CPython cannot stop one thread of a process safely: an exception injected into
running code leaves stdlib locks held and state half-written in a process that
keeps running. A process can be stopped safely, with everything it started, so
that is what a loss does under ``on_lost="exit"`` (as Airflow's supervisor ends
a task, and client-go's leader election exits): one bounded ladder on the
thread that found the loss.

1. one log line naming the lease, token, reason and exit status; logs flushed;
2. the lease's ``on_lost`` callbacks;
3. the face's stop hooks (``stop_hook``: Airflow's ``task.on_kill()``, Prefect
   reporting the run Crashed);
4. every descendant process frozen (SIGSTOP): by the keeper, if one lives
   (it ends them, SIGTERM then ``grace`` then SIGKILL, once this process is
   gone), else here, handed to a small shell that does the same once this
   process has ended, with every process of our group started since the
   freeze (our threads run on until the exit: a child one starts later is
   init's by then);
5. the process's other leases released, only now that no process it
   started runs (the keeper releases those it keeps once the job is gone);
6. ``os._exit(LEASE_LOST_EXIT_STATUS)``, at once: a child that died while we
   still ran would wake the thread waiting for it, and that thread would run on.
   A stop hook that has told its orchestrator the outcome itself may choose
   another status with ``exit_status`` (Airflow 3's task supervisor reads a
   failure it was told of only from a process that exits 0).

Timing (``core.timing``, counted from *W*, the window's close or the refusal):
steps 1-3 end by ``LADDER_ENDS``, steps 4-5 by ``STOP_BEGINS`` (less
``grace``), everything is gone by ``STOP_SHARE * margin``: before the store can
grant the lease to anyone else, the rest of the margin kept for clock-rate
drift. A process frozen longer than the margin (SIGSTOP, a VM pause) cannot
act until it resumes: the keeper's timer and death pipes stop it then, and the
fencing token covers its first write.
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any, NoReturn

from ..core import timing
from ..core.clock import now
from ..core.errors import LEASE_LOST_EXIT_STATUS
from . import kernel
from .bounded import bounded
from .descendants import descendants, end_frozen, freeze
from .heartbeat import get_heartbeat

if TYPE_CHECKING:
    from ..core.lease import Lease, LostCallback

log = logging.getLogger("lease_integrations")

_hooks: list[Callable[[], object]] = []
_hooks_lock = threading.Lock()
_stopping = threading.Lock()  # one ladder per process; a second loss waits for the exit
_exit_status: int | None = None  # set by a stop hook (exit_status), read by the ladder's exit


def exit_status(status: int | None = None) -> int:
    """The status the ladder's exit will use, after setting it to ``status``
    (0-255) if given. For a stop hook that has reported the outcome to its
    orchestrator itself, whose runner would misread ``LEASE_LOST_EXIT_STATUS``
    (Airflow 3: a failure the task told its supervisor counts only from a
    process that exits 0; any other status is a crash, retried). Only a
    ladder reads it: set elsewhere it changes nothing until a loss."""
    global _exit_status
    if status is not None:
        if isinstance(status, bool) or not isinstance(status, int) or not 0 <= status <= 255:
            raise ValueError(f"an exit status is an int from 0 to 255, got {status!r}")
        _exit_status = status
    return LEASE_LOST_EXIT_STATUS if _exit_status is None else _exit_status


@contextmanager
def stop_hook(hook: Callable[[], object]) -> Iterator[None]:
    """While the block runs, ``hook()`` is step 3 of the ladder: how a face
    stops work the process does not own (an operator's external job, a run's
    state at the orchestrator). Bounded in time like every step."""
    with _hooks_lock:
        _hooks.append(hook)
    try:
        yield
    finally:
        with _hooks_lock:
            if hook in _hooks:
                _hooks.remove(hook)


def stop_process(lease: Lease, callbacks: list[LostCallback], started: object = None,
                 ) -> NoReturn:
    """Run the ladder for ``lease`` (lost) and end the process. ``started``:
    work begun before the ladder (recording the loss in the store's history);
    if a ``Future``, it gets the ladder's first slot of time."""
    if not _stopping.acquire(blocking=False):
        threading.Event().wait()  # another loss is ending the process already
    # The job's threads run on meanwhile: one that ends the interpreter (the
    # block's LeaseLost escaping main, or a stop hook that made execute
    # return) must wait for the ladder, which ends the process itself.
    atexit.register(threading.Event().wait)
    keeper = lease.kept_by if getattr(lease.kept_by, "end_tree", None) else None
    keeper = keeper if keeper is not None and keeper.alive() else None
    w = timing.lost_at(now(), lease.trusted_until)
    stop_at = timing.stop_at(w, lease.margin, lease.grace)
    if keeper is not None and lease.stop_at is not None:
        stop_at = lease.stop_at  # the keeper's own word on when it stops us
    try:
        started_with = descendants()  # a stop hook may orphan some (BashOperator's on_kill)
        _steps_before_the_kill(lease, callbacks, started,
                               timing.ladder_ends(w, lease.margin, lease.grace))
        frozen_at = kernel.ticks_now()  # what our threads start from here is in no frozen set
        if keeper is not None:
            # Asked later than stop_at, the keeper has begun its hard stop,
            # and the job ends by SIGKILL, not 75: nothing here delays that.
            if keeper.end_tree(stop_at, started_with):
                keeper.disarm_for_exit()  # it ends them: SIGTERM first, not our group's SIGKILL
            frozen: set[int] = set()
        else:
            try:
                frozen = freeze(known=started_with)  # no descendant works from here on
            except Exception:  # never skip the kill: fall back to what was seen at the start
                log.exception("fail-stop: walking the process tree failed")
                frozen = started_with
        bounded(lambda: _release_others(lease, kept=keeper is None), stop_at,
                "releasing the other leases")
        bounded(flush, now() + lease.grace, "flushing the logs")
        group = kernel.own_group() if keeper is None else None  # (a keeper ends its own)
        end_frozen(frozen, lease.grace, after_we_exit=True,
                   born_in=None if group is None else (group, frozen_at))
        # The shell ends them, SIGTERM first: our exit must not SIGKILL our
        # group through our own death pipe (where no keeper keeps a lease).
        get_heartbeat().disarm_for_exit()
    finally:
        os._exit(exit_status())


def _steps_before_the_kill(lease: Lease, callbacks: list[LostCallback], started: object,
                           deadline: float) -> None:
    """Steps 1-3, each bounded. Nothing here may keep the tree from being
    frozen and ended: whatever goes wrong is logged and the ladder goes on."""
    try:
        # A quarter at most each: a logging handler may never return, and the
        # store may be why we lost the lease.
        bounded(functools.partial(_say_lost, lease), _quarter(deadline), "the loss's log line")
        if isinstance(started, Future):
            bounded(started.result, _quarter(deadline), "recording the loss in the store's history")
        for callback in callbacks:
            bounded(functools.partial(callback, lease), deadline,
                    f"on_lost callback {callback!r}")
        with _hooks_lock:
            hooks = list(reversed(_hooks))
        for hook in hooks:
            bounded(hook, deadline, f"stop hook {hook!r}")
    except BaseException:
        log.exception("fail-stop: a step before the kill failed; ending the process tree anyway")


def _say_lost(lease: Lease) -> None:
    log.critical(
        "lease %s (token %s) lost: %s; stopping this process and everything it started "
        "(exit status %d)", lease.key, lease.token, lease.lost_reason, LEASE_LOST_EXIT_STATUS,
        extra={"lease_event": "fail_stop", "lease_key": lease.key,
               "lease_token": lease.token, "lease_holder": lease.holder})
    flush()


def _quarter(deadline: float) -> float:
    at = now()
    return at + max(0.0, deadline - at) / 4


#: How long a SIGTERM waits for the process's leases to be given back.
SIGTERM_RELEASE_TIMEOUT = 2.0


_sigterm_checked = False


def release_on_sigterm() -> None:
    """Make SIGTERM give the process's leases back before it ends the process,
    as systemd, Kubernetes and every process manager stop a job (Ctrl-C
    already does, through the hold's exit). Installed from the main thread
    only while SIGTERM has its default action: an orchestrator's own handler
    (Airflow's task runner, a Prefect worker's) is left alone. No exception is
    raised into the job: the process then ends by SIGTERM as it would have."""
    global _sigterm_checked
    if _sigterm_checked or threading.current_thread() is not threading.main_thread():
        return
    _sigterm_checked = True  # once per process: whoever sets a handler later owns SIGTERM
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)


def _on_sigterm(signum: int, frame: object) -> None:
    log.warning("SIGTERM: giving back this process's leases, then ending as SIGTERM does")
    bounded(lambda: _release_others(None), now() + SIGTERM_RELEASE_TIMEOUT,
            "releasing the leases on SIGTERM")
    flush()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def release_all(held: Sequence[tuple[Lease, Any]]) -> None:
    """Give back ``held`` leases (each with its store) in parallel: they are
    healthy, and their next holders need not wait out their ttls."""
    threads = [threading.Thread(target=store.release, args=(lease.key, lease.secret, lease.token),
                                daemon=True) for lease, store in held]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _release_others(lost: Lease | None, *, kept: bool = True) -> None:
    """Every other lease this process holds, released (``release_all``); each
    taken first from what renews it (the keeper must not see its release as
    a refusal). ``kept=False`` leaves the keeper's leases to the keeper,
    which gives them back itself once the job's processes are gone."""
    from .client import get_keeper

    held = get_heartbeat().held() + (get_keeper().held() if kept else [])
    mine = [(lease, store) for lease, store in held
            if lease is not lost and lease.pid == os.getpid()]
    for lease, _ in mine:
        lease.kept_by.remove(lease)
    release_all(mine)


def flush() -> None:
    for handler in logging.getLogger().handlers + log.handlers:
        with suppress(Exception):
            handler.flush()
    for stream in (sys.stdout, sys.stderr):
        with suppress(Exception):
            stream.flush()


def after_fork() -> None:
    """A forked child runs none of its parent's faces, and must be able to
    run its own ladder."""
    global _hooks_lock, _stopping, _exit_status
    _hooks.clear()
    _hooks_lock, _stopping = threading.Lock(), threading.Lock()
    _exit_status = None

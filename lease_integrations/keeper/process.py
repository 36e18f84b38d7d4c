"""The keeper process: renews one job's leases and stops the job on loss.

Run as ``python -m lease_integrations.keeper.process`` by the job itself
(``client``), one per holding process, in a session of its own (a
signal to the job's process group is not meant for it). Everything it needs
comes on stdin, one JSON object a line: the job's pid, the store URLs with
their secrets, each lease with its owner secret. It answers on stdout
(``renewed``, ``lost``, ``frozen``) and logs to the stderr it shares with the
job, so its lines land in the task's or the run's log.

What it guarantees, whatever the job's interpreter does:

- renewals: the job's leases are renewed by the same heartbeat a job would
  run (batched per store, bounded calls, the trust window on
  ``CLOCK_BOOTTIME``), on the keeper's own store connections, while the job
  process is alive and not stopped (state ``T``: not renewed);
- the hard stop: a lease lost while its fail-stop block runs gets the job's
  own ladder until ``stop_at`` (``W + 0.7 * margin - grace``, W the trust
  window's close, or the moment the store refused); then the keeper freezes
  the job and every process below it, kills the job, gives the rest SIGTERM
  and ``grace`` seconds, then SIGKILL: all gone by ``W + 0.8 * margin``,
  before the store can expire the lease. It then releases the job's other
  leases and exits;
- its own death: its kernel timer (``KillTimer``) is kept at
  ``W + 0.9 * margin`` of the job's armed leases, so a keeper stuck past that
  dies, and its death SIGKILLs the job through the death pipe;
- the job's death: seen at once (a pidfd, never EOF on a pipe: a job that
  closed its descriptors or ran ``exec`` is alive). If it died inside a
  fail-stop block, what it started is ended (its process group, and every
  process of the snapshot of its tree taken each tick: those that left the
  group), then its leases are released at once; else its leases expire;
- the job alive while its pipe to us is gone (it closed its descriptors, or
  ran ``exec``): its leases are lost, and it is stopped at ``stop_at`` like
  any other loss.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import signal
import sys
import threading
from datetime import datetime, timezone
from typing import Any, cast

from ..core import timing
from ..core.clock import now
from ..core.errors import StoreUnavailable
from ..core.lease import Lease
from ..core.record import LeaseRecord
from ..core.store import LeaseStore
from . import wire
from .bounded import bounded
from .descendants import SNAPSHOT_EVERY, descendants, end_frozen, freeze
from .failstop import flush, release_all
from .heartbeat import Heartbeat
from .kernel import KillTimer, Process, alive, identify, is_gone, is_stopped, process_state, ticks_now

log = logging.getLogger("lease_integrations.keeper")

#: Seconds the keeper lets the job's messages gather before reading them.
COALESCE = 0.005
#: Seconds a job whose pipe closed has to show its death on its pidfd.
EXIT_SETTLES = 0.2
#: Seconds the keeper waits for the job's leases to be given back at its end.
RELEASE_WAIT = 3.0


class JobStopped(StoreUnavailable):
    """The job process is stopped (SIGSTOP, a debugger): not renewed."""


class _JobStore:
    """A job's store as the keeper's heartbeat sees it.

    Opened on first use, on the heartbeat's own thread, and again after a
    failed open: the keeper reads the job's messages on its main thread,
    which a slow network must never hold up (a release the job announces
    must be read before any verdict). Renewals happen only while the job
    runs: a job stopped alone is not busy, and renewing it would keep a lease
    for a process that cannot use it until someone resumed it."""

    def __init__(self, url: str, options: dict[str, Any], masked: str,
                 batch_renewals: bool, job: int) -> None:
        self._source = (url, options)
        self.url = masked
        self.batch_renewals = batch_renewals
        self._job = job
        self._store: LeaseStore | None = None
        self._opening = threading.Lock()

    def opened(self) -> LeaseStore:
        if self._store is None:
            with self._opening:
                if self._store is None:
                    from ..stores import connect

                    url, options = self._source
                    self._store = connect(url, **options)
        return self._store

    def _check_job(self) -> None:
        state = process_state(self._job)
        if is_stopped(state):
            raise JobStopped(f"the job process (pid {self._job}) is stopped (state {state}), "
                             "so it was not renewed", url=self.url)

    def renew(self, key: str, secret: str, token: int, ttl: float) -> bool:
        self._check_job()
        return self.opened().renew(key, secret, token, ttl)

    def renew_many(self, items: Any) -> Any:
        self._check_job()
        return self.opened().renew_many(items)

    def release(self, key: str, secret: str, token: int) -> bool:
        return self.opened().release(key, secret, token)

    def history(self, key: str, limit: int = 50) -> Any:
        return self.opened().history(key, limit)

    def record_event(self, *args: Any) -> None:
        self.opened().record_event(*args)


class KeptLease(Lease):
    """A job's lease as the keeper holds it."""

    def __init__(self, keeper: Keeper, lid: int, armed: bool, store: Any,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.keeper, self.lid, self.armed, self.store = keeper, lid, armed, store

    def _log_loss(self, reason: str) -> None:
        """Silent: the job logs its own loss, and the keeper logs the stop."""

    def renew_failed(self, error: str, error_type: str) -> None:
        """Told to the job, which counts and logs it with its own metrics."""
        self.keeper.outbox.send({"op": "renew_failed", "id": self.lid, "error": error,
                                 "type": error_type})

    def mark_lost(self, reason: str, before_callbacks: Any = None) -> bool:
        # A release the job said before it made it may still be in the pipe:
        # read it first, or a healthy release would look like a refusal.
        self.keeper.drain()
        if self.released:
            return False
        return super().mark_lost(reason, before_callbacks)


class Outbox:
    """What the keeper tells the job, written by one thread: a job that is
    busy and reads nothing never blocks a renewal. Renewals coalesce (the
    latest per lease is all the job needs), so what waits stays small, and
    go out grouped by the instant their batch started: one number for the
    batch, not one per lease (encoding those was most of a report's cost)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._cond = threading.Condition()
        self._renewed: dict[int, float] = {}
        self._messages: list[dict[str, Any]] = []
        threading.Thread(target=self._run, name="keeper-outbox", daemon=True).start()

    def renewed(self, lids: list[int], started: float) -> None:
        with self._cond:
            self._renewed.update(dict.fromkeys(lids, started))
            self._cond.notify()

    def send(self, message: dict[str, Any]) -> None:
        with self._cond:
            self._messages.append(message)
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._renewed and not self._messages:
                    self._cond.wait()
                messages, self._messages = self._messages, []
                renewed, self._renewed = self._renewed, {}
            if renewed:
                batches: dict[float, list[int]] = {}
                for lid, started in renewed.items():
                    batches.setdefault(started, []).append(lid)
                messages.append({"op": "renewed", "batches": list(batches.items())})
            try:
                _write_all(self._fd, wire.encode(messages))
            except OSError:
                return  # the job is gone; the main loop sees it too


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]


class Keeper:
    def __init__(self, job: int, out_fd: int, group: int | None = None) -> None:
        self.job = job
        #: The job's process group, if it leads one: ended with the job.
        self.group = group
        self.me = os.getpid()
        self.outbox = Outbox(out_fd)
        self.heartbeat = Heartbeat()
        self.heartbeat.on_renewed = self._renewed
        self.stores: dict[int, Any] = {}
        self.leases: dict[int, KeptLease] = {}
        #: The leases a fail-stop block runs under, by id: what the stopper
        #: watches, without a walk over every lease each tick.
        self.armed: dict[int, KeptLease] = {}
        self._inbox = threading.RLock()
        self._buffer = b""
        self._cond = threading.Condition()
        #: lease id -> when the hard stop for its loss is due (armed leases only)
        self._stops: dict[int, float] = {}
        self._rearm = False
        self._stop_at: float | None = None
        self._end_requested = False
        #: Processes seen below the job (each tick while a fail-stop block
        #: runs, and when a loss was known): a stop hook, or the job's death,
        #: may orphan them out of our walk. With their start times: a pid
        #: reused since is never taken for one of them.
        self._known: set[Process] = set()
        self._snapshot_at = 0.0
        self.stopping = False
        self.timer: KillTimer | None = None
        try:
            self.timer = KillTimer()
        except (OSError, AssertionError):
            log.warning("no kernel timer; a stuck keeper is not ended on time")
        threading.Thread(target=self._stopper, name="keeper-stopper", daemon=True).start()

    # -- what the job says --------------------------------------------------------
    def read(self, fd: int) -> bool:
        """Read what is there on stdin and act on it; False at EOF."""
        with self._inbox:
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                return True
            if not chunk:
                return False
            lines = (self._buffer + chunk).split(b"\n")
            self._buffer = lines.pop()
            # A hold that ended before we read it (most short ones): its add
            # and drop cancel out, and cost us nothing more.
            dropped = {line[2:] for line in lines if line[:2] == b"d "}
            gone = {line.split(b" ", 2)[1] for line in lines
                    if line[:2] == b"a " and line.split(b" ", 2)[1] in dropped}
            for line in lines:
                if line[:2] in (b"a ", b"d ") and line.split(b" ", 2)[1] in gone:
                    continue
                if line[:2] == b"a ":
                    self._add(wire.parse_add(line))
                elif line[:2] == b"d ":
                    self.apply({"op": "drop", "id": int(line[2:])})
                elif line:
                    self.apply(json.loads(line))
            return True

    def drain(self) -> None:
        with self._inbox:
            while select.select([0], [], [], 0)[0]:
                if not self.read(0):
                    return

    def apply(self, message: dict[str, Any]) -> None:
        op = message["op"]
        if op == "store":
            # The job's environment for the store's driver: set here, never
            # in our environment block (/proc/PID/environ), see client.
            os.environ.update(message["env"])
            store = self.stores[message["id"]] = _JobStore(
                message["url"], message["options"], message["masked"], message["batch"], self.job)
            threading.Thread(target=self._open, args=(message["id"], store), daemon=True,
                             name="keeper-open").start()
        elif op == "open" and message["id"] in self.stores:
            threading.Thread(target=self._open, args=(message["id"], self.stores[message["id"]]),
                             daemon=True, name="keeper-open").start()
        elif op == "add":
            self._add(message)
        elif op == "drop":
            lease = self.leases.pop(message["id"], None)
            self.armed.pop(message["id"], None)
            if lease is not None:
                self.heartbeat.remove(lease)
                lease.mark_released()
                with self._cond:  # the block ended (LeaseLost): its loss stops nothing now
                    self._stops.pop(lease.lid, None)
                    self._cond.notify()
        elif op == "end":
            with self._cond:
                self._note(message.get("known", ()))
                self._end_requested = True
                self._cond.notify()

    def _open(self, sid: int, store: _JobStore) -> None:
        """Open the store at once, off the main thread; say when it is open."""
        try:
            store.opened()
        except Exception as exc:  # the job's next acquire asks again ("open")
            log.warning("could not open the store yet: %s", exc)
            self.outbox.send({"op": "unopened", "store": sid})
            return
        self.outbox.send({"op": "ready", "store": sid})

    def _add(self, m: dict[str, Any]) -> None:
        store = self.stores[m["store"]]
        record = LeaseRecord(m["key"], m["holder"], m["token"], None, None, None,
                             observed_at=_EPOCH)
        lease = KeptLease(self, m["id"], m["armed"], store, record=record, ttl=m["ttl"],
                          margin=m["margin"], attempt_started=m["started"],
                          secret=m["secret"], grace=m["grace"])
        lease._trusted_until = m["trusted_until"]
        lease.adopted = bool(m.get("adopted"))
        lease.on_lost(self._lost)
        self.leases[lease.lid] = lease
        if lease.armed:
            self.armed[lease.lid] = lease
        self.heartbeat.add(lease, store, m["interval"], due=m["started"] + m["interval"])
        self._wake()

    def _renewed(self, leases: list[Lease], started: float) -> None:
        kept = cast("list[KeptLease]", leases)  # our heartbeat keeps no other kind
        self.outbox.renewed([lease.lid for lease in kept], started)
        if any(lease.armed for lease in kept):
            self.rearm_soon()  # an armed lease's deadline moved: the timer follows

    # -- loss -----------------------------------------------------------------------
    def _lost(self, lease: Lease) -> None:
        assert isinstance(lease, KeptLease)
        stop_at = timing.stop_at(timing.lost_at(now(), lease.trusted_until), lease.margin,
                                 lease.grace)
        self.outbox.send({"op": "lost", "id": lease.lid, "reason": lease.lost_reason,
                          "stop_at": stop_at})
        if not lease.armed:
            return
        self._note(descendants(self.job))
        log.critical(
            "lease %s (token %s) lost: %s; the job (pid %d) and every process it "
            "started are stopped within %.2f s unless the job ends itself first",
            lease.key, lease.token, lease.lost_reason, self.job, stop_at + lease.grace - now())
        with self._cond:
            self._stops[lease.lid] = stop_at
            self._cond.notify()

    def _note(self, pids: Any) -> None:
        """Add ``pids`` (seen below the job) to what is ended with it."""
        for pid in pids:
            if pid != self.me:
                process = identify(pid)
                if process is not None:
                    self._known.add(process)

    def _snapshot(self) -> None:
        """While a fail-stop block runs, note the job's tree every tick: if
        the job dies, its children belong to init, out of any walk."""
        at = now()
        if at < self._snapshot_at or not self.armed:
            return
        self._snapshot_at = at + SNAPSHOT_EVERY
        self._known = {p for p in self._known if alive(p)}
        self._note(descendants(self.job))

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify()

    def rearm_soon(self) -> None:
        """A renewal moved an armed lease's deadline: the stopper re-arms the
        timer (once for a whole batch of renewals, not once per lease)."""
        if not self._rearm:
            with self._cond:
                self._rearm = True
                self._cond.notify()

    def _timer_deadline(self) -> float | None:
        return min((timing.timer_at(lease.trusted_until, lease.margin)
                    for lease in list(self.armed.values())), default=None)

    def _stopper(self) -> None:
        """Keeps the kernel timer on the armed leases' deadlines, and runs the
        hard stop when one is due (or when the job's own ladder asks)."""
        while True:
            with self._cond:
                self._rearm = False
                deadline = self._timer_deadline()
                if self.timer is not None and deadline != self.timer.armed_at:
                    self.timer.arm(deadline)
                stop_at = min(self._stops.values(), default=None)
                if self._end_requested or (stop_at is not None and now() >= stop_at):
                    self._stop_at = stop_at
                    break
                self._snapshot()
                if not self.armed and stop_at is None:
                    self._cond.wait()  # nothing to watch until a block's lease comes
                    continue
                wait = SNAPSHOT_EVERY if stop_at is None else min(SNAPSHOT_EVERY, stop_at - now())
                self._cond.wait(max(0.0005, wait))
        self.stopping = True
        grace = max((lease.grace for lease in self.armed.values()), default=0.0)
        if self._end_requested:
            self._finish_after_ladder(grace)
        else:
            self._hard_stop(grace)
        self._release_others()
        flush()
        os._exit(0)

    def _hard_stop(self, grace: float) -> None:
        started = now()
        frozen = self._freeze(include_job=True)
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.job, signal.SIGKILL)
        self._end(frozen - {self.job}, grace)
        log.critical("stopped the job (pid %d, SIGKILL) and %d processes it "
                     "started in %.3f s", self.job, len(frozen) - 1, now() - started)

    def _finish_after_ladder(self, grace: float) -> None:
        """The job ran its ladder and exits itself: freeze what it started,
        say so, and end those processes once the job is gone."""
        frozen_at = ticks_now()
        frozen = self._freeze(include_job=False)
        self.outbox.send({"op": "frozen"})
        until = (self._stop_at or now() + 1.0) + grace
        while not is_gone(process_state(self.job)) and now() < until:
            select.select([], [], [], 0.002)
        if not is_gone(process_state(self.job)):
            frozen |= self._freeze(include_job=True)
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.job, signal.SIGKILL)
        # The job's threads ran on until it exited: children they started
        # since the freeze are in its group, init's by now.
        self._end(frozen - {self.job}, grace,
                  born_in=None if self.group is None else (self.group, frozen_at))

    def _freeze(self, *, include_job: bool) -> set[int]:
        """SIGSTOP the job (if asked), every process below it, and those seen
        below it before (``_known``: init's, if their parent died)."""
        known = {p[0] for p in self._known if alive(p)}
        if include_job:
            return freeze(self.job, known=known, spare={self.me})
        return freeze(below=self.job, known=known, spare={self.me})

    def _end(self, pids: set[int], grace: float,
             born_in: tuple[int, int] | None = None) -> None:
        shell = end_frozen(pids, grace, born_in=born_in)
        if shell is not None:
            shell.wait()

    def _release_others(self) -> None:
        """The job's healthy leases, given back now that nothing of the job
        runs: their next holders need not wait out their ttls. Not an adopted
        one: the run it belongs to (a DAG run, its other tasks) goes on
        elsewhere, and only that run may give it back."""
        held = [(lease, lease.store) for lease in list(self.leases.values())
                if not lease.lost.is_set() and not lease.released and not lease.adopted]
        if held:  # no hurry now: nothing of the job runs; only a next holder waits
            bounded(lambda: release_all(held), now() + RELEASE_WAIT, "releasing the leases")

    def job_gone(self) -> None:
        """The job died (its pidfd says so). Renewals stop at once. If it
        died inside a fail-stop block (an armed lease it never dropped: the
        OOM killer, a SIGKILL, its own ladder), what it started is ended
        first: its process group, and every process seen below it (by now
        init's), frozen, then SIGTERM and ``grace``, then SIGKILL; then its
        leases are released at once: nothing of the job runs, and the next
        holder need not wait out a ttl. Otherwise its leases expire."""
        if self.stopping:
            threading.Event().wait()  # the stopper finishes and exits
        self.drain()  # its last words: drops, an "end" with the processes it saw
        with self._cond:
            self.stopping = bool(self.armed) or bool(self._stops) or self._end_requested
        if self.stopping:
            if self.group is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.group, signal.SIGKILL)
            grace = max((lease.grace for lease in self.armed.values()),
                        default=0.0)
            self._end(self._freeze(include_job=False), grace)
            self._release_others()
        flush()
        os._exit(0)

    def input_gone(self) -> None:
        """EOF on our stdin while the job lives (its pidfd says so): it closed
        its descriptors or ran ``exec``. It can no longer hear us, release or
        drop: every lease is lost, and one under a fail-stop block stops the
        job at its ``stop_at`` like any other loss. Without one, we leave:
        the job's leases expire, and it hears of the loss when we exit."""
        for lease in list(self.leases.values()):
            self.heartbeat.remove(lease)
            lease.mark_lost("the job's pipe to its keeper closed while it held the lease "
                            "(it closed its descriptors, or ran exec): nothing renews it")
        with self._cond:
            stopping = bool(self._stops)
        if not stopping:
            flush()
            os._exit(0)


_EPOCH = datetime.fromtimestamp(0, timezone.utc)


def main(job_pidfd: int | None = None) -> None:
    """Keep one job's leases. ``job_pidfd``: the job's own pidfd, when we
    were forked for it by the server (``forkserver``) and are no child of it."""
    # stdout is the pipe to the job: nothing else may write there.
    out_fd = os.dup(1)
    os.dup2(2, 1)
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)  # the job's ends are ours to decide
    first = b""
    while not first.endswith(b"\n"):
        chunk = os.read(0, 1)
        if not chunk:
            return
        first += chunk
    hello = json.loads(first)
    job = hello["job"]
    # Descriptor 3 or 4 (passed, never read): the read end of the job's death
    # pipe, held open for as long as we live, so that the job's end closing
    # (its death, its descriptors closed, an exec) makes the kernel kill its
    # group (see kernel). The keeper's own pipe's write end is the other.
    logging.basicConfig(stream=sys.stderr, level=max(logging.WARNING, hello["log_level"]),
                        format="%(asctime)s %(levelname)s [lease-keeper %(process)d] %(message)s")
    if job_pidfd is not None:
        pidfd = job_pidfd
    else:
        try:
            pidfd = os.pidfd_open(job)
        except OSError:
            return
        if os.getppid() != job:
            return  # the job died before we looked
    keeper = Keeper(job, out_fd, hello.get("group"))
    os.set_blocking(0, False)
    watched = [0, pidfd]
    while True:
        ready, _, _ = select.select(watched, [], [])
        if pidfd in ready:
            keeper.job_gone()
        if 0 in ready:
            # Let a burst of acquires and releases gather: read together, a
            # hold that already ended costs nothing (see ``read``). Renewals
            # are due a heartbeat later; a verdict reads at once (``drain``).
            select.select([], [], [], COALESCE)
            if not keeper.read(0):
                # EOF is not death: ask the pidfd. A dying job's descriptors
                # close a moment before its pidfd turns readable: wait that out.
                if select.select([pidfd], [], [], EXIT_SETTLES)[0]:
                    keeper.job_gone()
                watched = [pidfd]
                keeper.input_gone()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--fork-server"]:
        from .forkserver import launched
        launched(sys.argv[2:], main)
    else:
        main()

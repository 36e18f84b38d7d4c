"""The job's side of its keeper: which leases it keeps, and what it says back.

A job that keeps the GIL for one long call (a big ``json.loads``, a sort, a C
extension) starves every thread of its own interpreter, the heartbeat's
included: its lease expires in the store while it is healthy, a contender is
granted it, and the job is stopped only when the call returns. So renewals,
the trust window and the hard stop live in a second process, the *keeper*
(``keeper.py``), one per holding process, which the kernel schedules apart
from the job. The job still takes and gives back its leases itself (its own
compare-and-swap); this module hands each lease over with one pipe write and
reads the keeper's ``renewed`` and ``lost`` reports on a thread.

A store is kept by the keeper when a second process can open it (it was made
by ``connect(url)`` from a URL, not ``memory://`` nor a client object the
user built) and the kernel tools are here (``kernel.available()``: Linux);
otherwise its leases keep the in-process heartbeat, decided and logged once
per store. ``LEASE_KEEPER=off`` in the environment keeps every store in
process. Each lease has one renewer for its whole life: an acquire first
waits (``takes``, up to ``START_WAIT``) for the keeper to have the store
open, before any lease is at stake; a keeper not ready by then leaves that
lease to the heartbeat.

Secrets (the store URL's password, each lease's owner secret) reach the
keeper on its stdin, never in its argv or environment.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import select
import subprocess
import sys
import threading
import weakref
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol

from ..core.clock import now
from ..core.errors import ConfigurationError
from ..core.lease import Lease
from ..core.sources import source_of
from ..core.store import LeaseStore
from . import forkserver, kernel, wire
from .containment import DeathPipes
from .descendants import SNAPSHOT_EVERY
from .heartbeat import get_heartbeat

log = logging.getLogger("lease_integrations")

ENV_SWITCH = "LEASE_KEEPER"
#: Seconds an acquire waits for a starting keeper to have its store open (a
#: forked keeper: milliseconds; a spawned one: an interpreter start, seconds
#: on a loaded host); past it, that lease is renewed in this process.
START_WAIT = 5.0

#: store -> whether its leases go to the keeper (decided once, logged once).
_decided: weakref.WeakKeyDictionary[LeaseStore, bool] = weakref.WeakKeyDictionary()


class Renewer(Protocol):
    """What keeps a lease renewed: the keeper, or the in-process heartbeat."""

    def add(self, lease: Lease, store: LeaseStore, interval: float, *,
            armed: bool = False) -> None: ...

    def remove(self, lease: Lease) -> None: ...


def keeps(store: LeaseStore) -> bool:
    """Whether ``store``'s leases go to the keeper; decided and logged once."""
    decided = _decided.get(store)
    if decided is not None:
        return decided
    why = _why_in_process(store)
    _decided[store] = why is None
    if why is not None:
        log.info("lease store %s: renewals stay in this process (%s); a job call that keeps "
                 "the GIL longer than ttl - margin - heartbeat then loses its lease",
                 store.url, why)
    return why is None


#: ``LEASE_KEEPER`` values, each to the mode it selects: a keeper forked
#: from the server (the default), one spawned per job, or none (renewals on
#: a thread of the job, the ladder in it).
MODES = {**dict.fromkeys(("", "on", "1", "yes", "true", "enabled", "keeper", "fork", "forked"),
                         "fork"),
         **dict.fromkeys(("spawn", "spawned"), "spawn"),
         **dict.fromkeys(("off", "0", "no", "false", "none", "disabled", "thread", "threads",
                          "in-process", "inprocess"), "thread")}


def keeper_mode() -> str:
    """``fork``, ``spawn`` or ``thread``, as ``LEASE_KEEPER`` says. A value
    it does not know is an error, raised when a lock is made: a typo must
    not leave a job in the one mode its operator meant to leave."""
    mode = _named_mode()
    if mode is None:
        raise ConfigurationError(f"${ENV_SWITCH}={os.environ[ENV_SWITCH]!r} is not a keeper "
                                 "mode: use one of fork (the default), spawn, thread (or off)")
    return mode


def _named_mode() -> str | None:
    return MODES.get(os.environ.get(ENV_SWITCH, "").strip().lower())


def _why_in_process(store: LeaseStore) -> str | None:
    if keeper_mode() == "thread":
        return f"${ENV_SWITCH} is {os.environ[ENV_SWITCH].strip()!r}"
    if source_of(store) is None:
        return "it cannot be opened in a second process (memory://, or built from a client object)"
    if not kernel.available():
        return f"no keeper on {sys.platform}: it needs Linux's pidfd, timer_create and F_SETSIG"
    return None


class Keeper:
    """The job's handle on its keeper process: spawned with the first lease,
    replaced if it dies. Thread-safe; one per process (``get_keeper``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._read_lock = threading.RLock()
        self._proc: subprocess.Popen[bytes] | forkserver.ForkedKeeper | None = None
        #: Our ends: ``out`` (the keeper's stdin), ``in`` (its stdout,
        #: non-blocking), ``keeper_pipe`` (the read end of the pipe whose
        #: writer is the keeper), ``job_pipe`` and ``job_pipe_read`` (the
        #: pipe whose writer is this process; the keeper holds its read end
        #: too): see ``kernel``. Each checked before use (``kernel.Ends``).
        self._ends = kernel.Ends()
        #: store -> the keeper's id for it (weak: an id() could be reused)
        self._store_ids: weakref.WeakKeyDictionary[LeaseStore, int] = weakref.WeakKeyDictionary()
        self._leases: dict[int, tuple[Lease, bool, int]] = {}  # id -> lease, armed, generation
        self._stores: dict[int, LeaseStore] = {}  # lease id -> its store
        #: Stores the keeper has opened (it said ``ready``): ``takes`` waits
        #: for this before an acquire, so that no lease is at stake while
        #: a keeper starts (its interpreter, the store's driver, a connection).
        self._ready: set[int] = set()
        self._unopened: set[int] = set()  # it tried and failed (its log says why)
        self._opened = threading.Condition()
        self._ids = itertools.count(1)
        self._armed = 0
        self._buffer = b""
        self._frozen = threading.Event()
        self._stopping = False
        self._reader: threading.Thread | None = None
        self._broken = False  # the keeper could not be started: all stays in process
        #: The read ends of both death pipes (the keeper's and ours) that
        #: kill our group, and the groups below us, when either writer dies.
        self._death: DeathPipes | None = None
        #: Process groups given to ``contain``: added to each keeper's pipes.
        self._contained: set[int] = set()
        self._generation = 0
        self.renewals = 0  # renewals the keeper reported, for benchmarks

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    # -- what the lock calls ----------------------------------------------------
    def add(self, lease: Lease, store: LeaseStore, interval: float, *,
            armed: bool = False) -> None:
        with self._lock:
            # ``takes`` has just looked at the keeper and named the store to
            # it: its id is known unless the keeper has died since (the reader
            # then forgets the ids, see ``_read_loop``).
            sid = self._store_ids.get(store)
            if sid is None:
                sid = self._prepare(store)
            lid = next(self._ids)
            lease.keeper_id = lid
            lease.sync = self.sync
            if self._broken:  # no keeper could be started since ``takes``
                lease.kept_by = get_heartbeat()
                lease.kept_by.add(lease, store, interval)
                return
            self._leases[lid] = (lease, armed, self._generation)
            self._stores[lid] = store
            self._write(wire.add(lid, sid, lease, interval, armed))
            if armed:
                self._armed += 1
                if self._armed == 1:
                    self._set_death_pipe(True)

    def remove(self, lease: Lease) -> None:
        """Stop keeping ``lease``: said before the caller releases it in the
        store, so the keeper never takes that release for a refused renewal
        of a healthy lease."""
        with self._lock:
            entry = self._leases.pop(lease.keeper_id, None)
            self._stores.pop(lease.keeper_id, None)
            if entry is None:
                return
            self._write(wire.drop(lease.keeper_id))
            if entry[1] and entry[2] == self._generation:
                self._armed -= 1
                if self._armed == 0:
                    self._set_death_pipe(False)

    def prepare(self, store: LeaseStore) -> None:
        """Start the keeper and have it open ``store`` now, when a lock on it
        is made: the first hold then waits for little or nothing."""
        with self._lock:
            self._prepare(store)

    def takes(self, store: LeaseStore, timeout: float = START_WAIT, *, wait: bool = True) -> bool:
        """Whether the keeper has ``store`` open, waiting up to ``timeout``
        for it: called before an acquire, so a lease is never taken while
        its keeper cannot renew it yet, and never has two renewers. False
        (the lease goes to this process's heartbeat) if no keeper could be
        started, or it could not open the store (it is asked to try again
        for the next acquire), or was not ready in time. ``wait=False``:
        only whether it has the store open now."""
        with self._lock:
            sid = self._prepare(store)
            if sid in self._ready or not wait:
                return sid in self._ready
        deadline = now() + timeout
        with self._opened:
            while sid not in self._ready:
                remaining = deadline - now()
                failed = sid in self._unopened
                if failed or self._broken or remaining <= 0 or not self.alive():
                    self._unopened.discard(sid)
                    break
                self._opened.wait(remaining)
            else:
                return True
        log.warning("the lease keeper %s store %s: this lease is renewed in this process",
                    "could not open" if failed else f"had not opened after {timeout:g} s",
                    store.url)
        if failed:
            with self._lock:
                self._send([{"op": "open", "id": sid}])
        return False

    def _prepare(self, store: LeaseStore) -> int:
        """The keeper's id for ``store`` (told of it once), ``_lock`` held."""
        self._ensure_running(store)
        sid = self._store_ids.get(store)
        if sid is None:
            source = source_of(store)
            assert source is not None  # keeps() said so
            url, options = source
            sid = self._store_ids[store] = next(self._ids)
            # With the job's environment as it is now, not as it was when the
            # keeper started: the store's driver reads it (AWS_ENDPOINT_URL,
            # PGPASSWORD...), and a job may set it after an earlier store.
            env = {k: v for k, v in os.environ.items() if not _plain(k)}
            self._send([{"op": "store", "id": sid, "url": url, "options": options,
                         "masked": store.url, "batch": store.batch_renewals, "env": env}])
        return sid

    def held(self) -> list[tuple[Lease, LeaseStore]]:
        """Every lease the keeper keeps for us, with its store."""
        with self._lock:
            return [(entry[0], self._stores[lid]) for lid, entry in self._leases.items()]

    def sync(self) -> None:
        """Read what the keeper has said so far, without waiting: a job that
        was busy judges its trust window on the keeper's latest renewal.
        Under the reader's lock: a report the reader thread has taken from
        the pipe but not yet acted on (a starved thread may sit on it) is
        acted on before we judge; then whatever else is in the pipe."""
        with self._read_lock:
            while (fd := self._ends.get("in")) >= 0 and select.select([fd], [], [], 0)[0]:
                if not self._pump(0):
                    return

    def end_tree(self, deadline: float, known: set[int]) -> bool:
        """The job's ladder is done: ask the keeper to freeze every process
        the job started, and those in ``known`` (seen below the job when the
        ladder began: a stop hook may have orphaned them since), which it
        ends once the job has exited; wait for its word until ``deadline``.
        False if it did not answer in time."""
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                return False
            self._stopping = True
            if self._death is not None:  # the keeper ends the tree, SIGTERM first
                self._death.looking = False
            self._send([{"op": "end", "known": sorted(known - {self._proc.pid})}])
        while not self._frozen.is_set():
            remaining = deadline - now()
            if remaining <= 0:
                return False
            if threading.current_thread() is self._reader:
                if not self._pump(remaining):
                    return False  # the keeper is gone
            else:
                self._frozen.wait(remaining)
        return True

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    # -- the keeper process -----------------------------------------------------
    def _ensure_running(self, store: LeaseStore) -> None:
        """Start a keeper if none runs (with ``self._lock`` held). Only the
        spawn is waited for here; its start (imports, the store's driver, a
        connection) is waited for by ``takes``, before an acquire. The spawn
        cannot go to a thread: a job that keeps the GIL from its first hold
        on would never let that thread run."""
        if self._broken or (self._proc is not None and self._proc.poll() is None):
            return
        self._close_fds()
        self._generation += 1  # the old keeper's reader reports its own leases lost
        self._store_ids.clear()
        self._ready.clear()
        self._unopened.clear()
        self._armed = 0
        source = source_of(store)
        assert source is not None  # keeps() said so
        # The scheme lets the fork server load that store's driver once, for all.
        self._spawn(self._generation, source[0].split("://", 1)[0].lower())

    def _spawn(self, generation: int, scheme: str) -> None:
        """A keeper forked by the fork server, else spawned here, each with
        pipes of its own: a server that froze holding one set must not keep
        the other keeper's death pipe open."""
        proc: subprocess.Popen[bytes] | forkserver.ForkedKeeper | None = None
        if _named_mode() != "spawn":  # (checked when the lock was made)
            ours, theirs = _pipes()
            try:
                proc = _forked(theirs, scheme)
            finally:
                _close(theirs[:3] if proc is not None else theirs[:3] + tuple(ours.values()))
        if proc is None:
            ours, theirs = _pipes()
            try:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "lease_integrations.keeper.process"],
                    stdin=theirs[0], stdout=theirs[1], pass_fds=theirs[2:],
                    start_new_session=True, env=keeper_environment(), close_fds=True)
            except OSError as exc:  # the leases stay renewed in this process
                _close(tuple(ours.values()))
                log.error("could not start the lease keeper (%s): renewals stay in this "
                          "process, and a job call that keeps the GIL can lose its lease", exc)
                self._broken = True
                with self._opened:
                    self._opened.notify_all()
                return
            finally:
                _close(theirs[:3])
        out, in_ = ours["out"], ours["in"]
        self._proc = proc
        self._ends = kernel.Ends(**ours)
        os.set_blocking(in_, False)
        kernel.widen_pipe(out)
        self._death = DeathPipes(self._ends, ("keeper_pipe", "job_pipe_read"),
                                 {"keeper_pipe": None, "job_pipe_read": "job_pipe"},
                                 spare=lambda: {proc.pid, *forkserver.launchers()})
        for group in self._contained:
            self._death.add_owner(-group)
        self._send([{"op": "hello", "job": os.getpid(), "group": kernel.own_group(),
                     "log_level": logging.getLogger("lease_integrations").getEffectiveLevel()}])
        self._reader = threading.Thread(target=self._read_loop, args=(proc, generation),
                                        name="lease-keeper-reader", daemon=True)
        self._reader.start()

    def _send(self, messages: list[dict[str, Any]]) -> None:
        self._write(wire.encode(messages))

    def _write(self, data: bytes) -> None:
        fd = self._ends.get("out")
        try:
            while data and fd >= 0:
                data = data[os.write(fd, data):]
        except OSError:  # the keeper is gone: the reader reports its leases lost
            pass

    def _set_death_pipe(self, armed: bool) -> None:
        """Arm (or disarm) both death pipes: the keeper's death, and ours
        (our death, our descriptors closed, an exec), kill our process group
        and the groups below us (``containment``)."""
        if self._death is not None:
            self._death.arm(armed)

    @contextmanager
    def contain(self, group: int) -> Iterator[None]:
        """While the block runs, the death pipes kill process group ``group``
        too, from its start (a look would find it within a tick):
        ``leasectl run`` starts its command in a session of its own."""
        with self._lock:
            self._contained.add(group)
            if self._death is not None:
                self._death.add_owner(-group)
        try:
            yield
        finally:
            with self._lock:
                self._contained.discard(group)
                if self._death is not None:
                    self._death.drop_owner(-group)

    def disarm_for_exit(self) -> None:
        """See ``DeathPipes.disarm_for_exit``. No lock: a thread of the job
        may hold it, stuck, while we exit."""
        if self._death is not None:
            self._death.disarm_for_exit()

    def _read_loop(self, proc: subprocess.Popen[bytes] | forkserver.ForkedKeeper,
                   generation: int) -> None:
        while self._pump(SNAPSHOT_EVERY):  # (a timeout: see that ``in`` is still ours)
            pass
        code = proc.wait()
        with self._lock:
            gone = [lid for lid, entry in self._leases.items() if entry[2] == generation]
            leases = [self._leases.pop(lid)[0] for lid in gone]
            for lid in gone:
                self._stores.pop(lid, None)
            if self._proc is proc:
                self._armed = 0
                self._set_death_pipe(False)
                self._store_ids.clear()  # the next add asks for a keeper again
        with self._opened:  # an acquire waiting for it to open a store gives up
            self._opened.notify_all()
        for lease in leases:
            status = "" if code is None else f" with status {code}"
            lease.mark_lost(f"the lease keeper (pid {proc.pid}) exited{status}: "
                            "nothing renews the lease any more")

    def _pump(self, timeout: float | None) -> bool:
        """Read and act on what the keeper said, waiting up to ``timeout``
        (None: until it says something). False once it is gone, or its
        pipe is no longer ours."""
        fd = self._ends.get("in")
        if fd < 0:
            return False
        try:
            ready, _, _ = select.select([fd], [], [], timeout)
        except (OSError, ValueError):
            return False
        if not ready:
            return True
        with self._read_lock:
            if self._ends.get("in") != fd:
                return False
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                return True  # another thread read it first
            except OSError:
                return False
            if not chunk:
                return False
            lines = (self._buffer + chunk).split(b"\n")
            self._buffer = lines.pop()
            for line in lines:
                self._dispatch(json.loads(line))
        return True

    def _dispatch(self, message: dict[str, Any]) -> None:
        op = message["op"]
        if op == "renewed":
            for started, lids in message["batches"]:
                self.renewals += len(lids)
                for lid in lids:
                    entry = self._leases.get(lid)
                    if entry is not None:
                        entry[0].renewed(started)
        elif op in ("ready", "unopened"):
            with self._opened:
                (self._ready if op == "ready" else self._unopened).add(message["store"])
                self._opened.notify_all()
        elif op == "lost" and not self._stopping:
            entry = self._leases.get(message["id"])
            if entry is not None:
                entry[0].stop_at = message["stop_at"]
                entry[0].mark_lost(message["reason"])
        elif op == "renew_failed":
            entry = self._leases.get(message["id"])
            if entry is not None:
                entry[0].renew_failed(message["error"], message["type"])
        elif op == "frozen":
            self._frozen.set()

    def _close_fds(self) -> None:
        """Close our ends of a keeper that is gone (or, in a forked child,
        of the parent's keeper: the keeper watches the parent itself, not
        these pipes; and the child must not hold the parent's end of its
        death pipe open): only those still ours (``kernel.Ends``)."""
        if self._death is not None:
            self._death.close()
            self._death = None
        self._ends.close_all()


_keeper: Keeper | None = None
_keeper_lock = threading.Lock()


#: What the keeper's environment (``/proc/PID/environ``, readable by every
#: process of the user) keeps of the job's: names, and prefixes. The rest
#: (a ``LEASE_STORE_URL``, an ``AIRFLOW_CONN_*``, ``PGPASSWORD``...) comes on
#: its stdin with the store's URL, and is set in its ``os.environ`` (for the
#: store's driver), never in that block.
_ENV_KEEP = frozenset({"PATH", "HOME", "USER", "LOGNAME", "LANG", "TZ", "TMPDIR",
                       "VIRTUAL_ENV", "SSL_CERT_FILE", "SSL_CERT_DIR", "SYSTEMROOT"})
_ENV_KEEP_PREFIXES = ("LC_", "PYTHON")


def _plain(name: str) -> bool:
    return name in _ENV_KEEP or name.startswith(_ENV_KEEP_PREFIXES)


def keeper_environment() -> dict[str, str]:
    """The keeper's environment: the job's, scrubbed (``_plain``), with
    this package importable."""
    env = {name: value for name, value in os.environ.items() if _plain(name)}
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    return env


def _pipes() -> tuple[dict[str, int], tuple[int, int, int, int]]:
    """A new keeper's pipes: our ends (``out``: its stdin; ``in``: its
    stdout; ``keeper_pipe``: the read end of the pipe it writes; ``job_pipe``
    and ``job_pipe_read``: the pipe we write, whose read end it holds too,
    see ``kernel``), and its ends (stdin, stdout, ``keeper_pipe``'s write
    end, ``job_pipe``'s read end). Plain descriptors, no file objects: a
    file object closes its number when collected, and that number may be a
    user's file by then."""
    to_keeper, out = os.pipe()
    in_, from_keeper = os.pipe()
    keeper_pipe, keeper_pipe_write = os.pipe()
    job_pipe_read, job_pipe = os.pipe()
    return ({"out": out, "in": in_, "keeper_pipe": keeper_pipe, "job_pipe": job_pipe,
             "job_pipe_read": job_pipe_read},
            (to_keeper, from_keeper, keeper_pipe_write, job_pipe_read))


def _close(fds: tuple[int, ...]) -> None:
    for fd in fds:
        os.close(fd)


def _forked(theirs: tuple[int, int, int, int], scheme: str) -> forkserver.ForkedKeeper | None:
    """A keeper from the fork server (``forkserver``), holding ``theirs``,
    or None: the caller spawns one."""
    to_keeper, from_keeper, keeper_pipe_write, job_pipe_read = theirs
    pidfd = cwd = -1
    try:
        pidfd = os.pidfd_open(os.getpid())
        cwd = os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        fds = {"stdin": to_keeper, "stdout": from_keeper, "stderr": 2,
               "keeper_pipe_write": keeper_pipe_write, "job_pipe_read": job_pipe_read,
               "job_pidfd": pidfd, "cwd": cwd}
        return forkserver.request(fds, keeper_environment(), scheme)
    except OSError:
        return None
    finally:
        for fd in (pidfd, cwd):
            if fd >= 0:
                os.close(fd)


def get_keeper() -> Keeper:
    global _keeper
    keeper = _keeper
    if keeper is not None:
        return keeper
    with _keeper_lock:
        if _keeper is None:
            _keeper = Keeper()
        return _keeper


def contain(store: LeaseStore, group: int) -> AbstractContextManager[None]:
    """``contain`` of whichever keeps ``store``'s leases: the keeper's
    death pipes, or this process's own (no keeper)."""
    return get_keeper().contain(group) if keeps(store) else get_heartbeat().contain(group)


def after_fork() -> None:
    """In a forked child: no keeper, and none of the parent's ends of its
    pipes (the child must not hold the job's death pipe open)."""
    global _keeper, _keeper_lock
    if _keeper is not None:
        _keeper._close_fds()  # the child keeps none of its parent's leases
    _keeper, _keeper_lock = None, threading.Lock()

__all__ = ["ENV_SWITCH", "MODES", "Keeper", "Renewer", "contain", "get_keeper", "keeper_mode", "keeps"]

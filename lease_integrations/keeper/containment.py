"""Death pipes, and every owner they kill with the job.

An armed death pipe's read end has the kernel SIGKILL its owner when the
pipe's last writer is gone (see ``kernel``). The job's own group (or the job
alone, when it only joined a group) is the first owner. A group led by a
process below the job (a child started in a session of its own, as
Airflow's ``SubprocessHook`` starts a command, or ``leasectl run``'s) is out
of reach of a signal to the job's group: while a fail-stop block runs, the
job looks below itself every ``SNAPSHOT_EVERY`` and gives each such group a
read end of its own, so the kernel ends it in the same instant.

One mechanism whether a keeper keeps the job's leases (readers of the
keeper's pipe and of the job's, ``client``) or none does (the job's own
pipe, every end in the job, ``heartbeat``).
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
from collections.abc import Callable
from contextlib import suppress

from . import kernel
from .descendants import SNAPSHOT_EVERY, descendants, group_alive

log = logging.getLogger("lease_integrations")

#: Owners (processes, groups) below the job given read ends of their own at
#: most, each taking descriptors from the job's limit. Past it, the keeper's
#: snapshot (where a keeper runs) still ends the rest when the job dies.
MAX_OWNERS = 32


class DeathPipes:
    """The read ends that kill the job's tree, armed together.

    ``readers`` are the ends owned by the job's own group; ``copies`` names
    which of them get a copy per owner below the job, each with the name of
    the job's write end of that pipe (or None: another process writes it).
    That writer is kept numbered above every copy: a dying process's files
    are released highest number first (this kernel), and a reader released
    before the writer would have its owner forgotten. ``above_writer``: an
    end kept above the writer in turn (see ``own``)."""

    def __init__(self, ends: kernel.Ends, readers: tuple[str, ...],
                 copies: dict[str, str | None], *, above_writer: str | None = None,
                 spare: Callable[[], set[int]] = set) -> None:
        self.ends = ends
        self._copies = copies
        self._above_writer = above_writer
        self._spare = spare  # processes below the job that are not the job's (its keeper)
        self._flags = {name: kernel.prepare_death_pipe(ends.get(name)) for name in readers}
        self._owners: set[int] = set()
        self._lock = threading.Lock()
        self._armed = False
        self._closed = threading.Event()
        self._looker: threading.Thread | None = None
        #: Cleared when a keeper ends the tree itself (SIGTERM first): the
        #: look must not hand it read ends that would SIGKILL it sooner.
        self.looking = True

    @classmethod
    def own(cls) -> DeathPipes:
        """A job's own death pipe, every end in the job (no keeper). A dying
        process's files are released last closed first on this kernel (6.x),
        first closed first on older ones: the write end lies between two read
        ends by number, each an open file description of its own, so in
        either order one armed reader is open when the writer goes."""
        low, write = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)  # the read end gets the lower number
        other = kernel.another_reader(low)
        try:
            high = fcntl.fcntl(other, fcntl.F_DUPFD_CLOEXEC, write + 1)
        finally:
            os.close(other)
        return cls(kernel.Ends(low=low, write=write, high=high), ("low", "high"),
                   {"low": "write"}, above_writer="high")

    def arm(self, armed: bool) -> None:
        """Arm (or disarm) every read end: only while a fail-stop block runs
        may the job's death end its tree."""
        with self._lock:
            self._set(armed)
            if armed and self._looker is None:
                self._looker = threading.Thread(target=self._look_every_tick, daemon=True,
                                                name="lease-death-pipes")
                self._looker.start()

    def disarm_for_exit(self) -> None:
        """The ladder has frozen what the job started, and ends it once the
        job exits (SIGTERM, then ``grace``): the job's exit must not SIGKILL
        its group first. No lock: a thread of the job may hold it, stuck."""
        self.looking = False
        self._set(False)

    def _set(self, armed: bool) -> None:
        self._armed = armed
        for name, flags in list(self._flags.items()):
            fd = self.ends.get(name)
            if fd >= 0:
                kernel.set_death_pipe(fd, armed, flags)

    def add_owner(self, owner: int) -> None:
        """Kill ``owner`` (a process, or ``-pgid`` a group) with the job."""
        with self._lock:
            self._add(owner)

    def drop_owner(self, owner: int) -> None:
        with self._lock:
            self._drop(owner)

    def _add(self, owner: int) -> None:
        self._owners.add(owner)
        for base, writer in self._copies.items():
            name = f"{base}@{owner}"
            fd = self.ends.get(base)
            if fd < 0 or name in self._flags:
                continue
            try:
                reader = kernel.another_reader(fd)
            except OSError:  # out of descriptors: a keeper's snapshot still covers it
                continue
            self.ends.add(name, reader)
            if writer is not None:
                self.ends.move_above(writer, reader)
                if self._above_writer is not None:
                    self.ends.move_above(self._above_writer, self.ends.get(writer))
            try:
                self._flags[name] = kernel.prepare_death_pipe(reader, owner)
            except OSError:  # gone already
                self.ends.close(name)
                continue
            if self._armed:
                kernel.set_death_pipe(reader, True, self._flags[name])
                if not self._armed:  # disarmed for exit meanwhile, without the lock
                    kernel.set_death_pipe(reader, False, self._flags[name])

    def _drop(self, owner: int) -> None:
        self._owners.discard(owner)
        names = [name for name in self._flags if name.endswith(f"@{owner}")]
        for name in names:
            flags, fd = self._flags.pop(name), self.ends.get(name)
            if fd >= 0:
                kernel.set_death_pipe(fd, False, flags)
        self.ends.close(*names)

    def look(self) -> None:
        """Give a read end to every process group led by a process below
        the job and, when the job's group is not its to kill (it only joined
        it), to each process below it in that group; let go of owners with
        no process left (the kernel holds the process or group itself, not
        its number, so a later one with that id is never signalled)."""
        joined = os.getpgid(0) if kernel.own_group() is None else None
        found = set()
        for pid in descendants() - self._spare():
            with suppress(OSError):
                group = os.getpgid(pid)
                if group in (pid, joined):
                    found.add(-pid if group == pid else pid)
        with self._lock:
            if not self._armed or not self.looking or self._closed.is_set():
                return
            for owner in self._owners - found:
                if not (group_alive(-owner) if owner < 0 else kernel.stat(owner)):
                    self._drop(owner)
            room = max(0, MAX_OWNERS - len(self._owners))
            for owner in sorted(found - self._owners)[:room]:
                self._add(owner)  # groups (negative) first: each covers more

    def _look_every_tick(self) -> None:
        while not self._closed.wait(SNAPSHOT_EVERY):
            if self._armed and self.looking:
                try:
                    self.look()
                except Exception:  # never stop looking: the next tick tries again
                    log.debug("looking below the job failed", exc_info=True)

    def close(self) -> None:
        """Close every end still ours (a keeper gone, or a forked child's
        copies: the child must not hold the job's writer open). No lock:
        in a forked child, a thread of the parent may have held it."""
        self._closed.set()
        self.ends.close_all()
        self._flags.clear()

"""The Linux kernel's ways to end a process that need nothing from it.

A Python signal handler or timer runs only when its interpreter gets the GIL
back, which a long C call (``json.loads``, ``list.sort``, most extensions)
delays for as long as it runs. These act in the kernel instead:

- ``KillTimer``: a POSIX timer (``timer_create`` on ``CLOCK_BOOTTIME``) that
  delivers SIGKILL to its own process at an absolute time, GIL held or not;
  re-arming it is one ~2 µs syscall. The keeper arms one on itself, so a
  keeper that is stuck dies on time.
- the *death pipes*: a pipe's read end set to ``O_ASYNC`` with the kernel's
  "I/O possible" signal replaced by SIGKILL (``F_SETSIG``) and its owner set
  to the job's process group (``F_SETOWN(-pgid)``, when the job leads one, as
  task runners start a task; else the job alone): when the last writer dies,
  the kernel kills the whole group within milliseconds, GIL or not. Two of
  them: the keeper holds the *keeper pipe*'s write end (the keeper dies: the
  job's group dies), the job holds the *job pipe*'s write end (the job dies,
  closes its descriptors or runs ``exec``: its group dies, whatever the
  keeper is doing, frozen included). ``set_death_pipe(fd, armed)`` turns one
  on and off (clearing ``O_ASYNC``, never closing: a close would count as
  the writer's death). ``another_reader`` gives a pipe a second read end
  with an owner of its own (a process group below the job, see
  ``containment``): the kernel signals every armed reader's owner. Where no
  keeper runs, the job's own death pipe has every end in the job
  (``containment.DeathPipes.own``): its death, closed descriptors or
  ``exec`` still kill its group.
- ``stat`` (the one reader of ``/proc/PID/stat`` here) and ``below``: a
  process's state, parent and start time (a pid with its start time is
  safe from reuse), and the processes below some, read from the kernel's
  ``children`` lists (no walk of all of ``/proc``): the keeper snapshots
  the job's tree every tick, to end it when the job dies;
- ``process_state``: a job stopped alone (SIGSTOP, a debugger: state ``T``)
  is not alive, and must not be renewed.

``available()`` is False where any of them is missing (macOS, the BSDs): the
keeper is then not used (see ``client``).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import fcntl
import os
import signal
import sys
import time

from ..core.clock import CLOCK_ID

F_SETSIG = 10  # <fcntl.h>; not in Python's fcntl module
F_SETPIPE_SZ = 1031
SIGEV_SIGNAL = 0
TIMER_ABSTIME = 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


class _Sigevent(ctypes.Structure):
    # glibc's struct sigevent: a value union, signo, notify, then padding to 64 bytes.
    _fields_ = [("sigev_value", ctypes.c_void_p), ("sigev_signo", ctypes.c_int),
                ("sigev_notify", ctypes.c_int), ("_pad", ctypes.c_int * 12)]


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


_LIBC = _libc()


def available() -> bool:
    """Whether every tool here works on this system."""
    return (_LIBC is not None and CLOCK_ID is not None and hasattr(os, "pidfd_open")
            and hasattr(_LIBC, "timer_create") and os.path.isdir("/proc"))


class KillTimer:
    """A kernel timer that SIGKILLs this process at ``arm(at)`` (an absolute
    time on ``clock.now()``); ``arm(None)`` disarms it. Not inherited by
    fork, gone with execve."""

    def __init__(self) -> None:
        assert _LIBC is not None and CLOCK_ID is not None
        event = _Sigevent(sigev_value=None, sigev_signo=signal.SIGKILL, sigev_notify=SIGEV_SIGNAL)
        self._id = ctypes.c_void_p()
        if _LIBC.timer_create(CLOCK_ID, ctypes.byref(event), ctypes.byref(self._id)) != 0:
            raise OSError(ctypes.get_errno(), "timer_create failed")
        self.armed_at: float | None = None

    def arm(self, at: float | None) -> None:
        assert _LIBC is not None
        spec = _Itimerspec()
        if at is not None:  # a zero it_value would disarm: never arm at the epoch itself
            seconds = max(at, 1e-9)
            spec.it_value.tv_sec = int(seconds)
            spec.it_value.tv_nsec = int((seconds - int(seconds)) * 1e9)
        if _LIBC.timer_settime(self._id, TIMER_ABSTIME, ctypes.byref(spec), None) != 0:
            raise OSError(ctypes.get_errno(), "timer_settime failed")
        self.armed_at = at


def own_group() -> int | None:
    """This process's group id if it leads the group (its own, as task
    runners start a task), else None: a group it merely joined (a shell's
    pipeline, a test runner's) is not its to kill."""
    pgid = os.getpgid(0)
    return pgid if pgid == os.getpid() else None


def prepare_death_pipe(read_fd: int, owner: int | None = None) -> int:
    """Make the kernel SIGKILL ``owner`` (``F_SETOWN``: a pid, or ``-pgid``;
    default: this process's group, or this process alone, see
    ``own_group``), not send SIGIO, when ``read_fd`` becomes readable (its
    last writer died), once ``set_death_pipe`` arms it. Returns the fd's
    flags, which ``set_death_pipe`` then sets in one call."""
    if owner is None:
        group = own_group()
        owner = -group if group is not None else os.getpid()
    fcntl.fcntl(read_fd, fcntl.F_SETOWN, owner)
    fcntl.fcntl(read_fd, F_SETSIG, signal.SIGKILL)
    return fcntl.fcntl(read_fd, fcntl.F_GETFL) & ~os.O_ASYNC


def another_reader(read_fd: int) -> int:
    """A second read end of ``read_fd``'s pipe with an open file description
    of its own (``/proc/self/fd``), so it can have an owner of its own: the
    kernel signals every armed reader's owner when the last writer dies."""
    return os.open(f"/proc/self/fd/{read_fd}", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)


def set_death_pipe(read_fd: int, armed: bool, flags: int) -> None:
    fcntl.fcntl(read_fd, fcntl.F_SETFL, flags | os.O_ASYNC if armed else flags)


def widen_pipe(fd: int, size: int = 1 << 20) -> None:
    """Room for a burst of messages (best effort: the limit is a sysctl)."""
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, F_SETPIPE_SZ, size)


def stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, start time in clock ticks) of ``pid`` from
    ``/proc``, or None when it is gone. The name may hold ')': split after
    the last one."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode("ascii", "replace")
        fields = text[text.rindex(")") + 2:].split()
        return fields[0], int(fields[1]), int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def ticks_now() -> int:
    """Now, in the clock ticks of ``stat``'s start times (boot time, since
    Linux 5.3; the monotonic clock before, which lags it after a suspend:
    a process started after this reading then seems older, never newer)."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * os.sysconf("SC_CLK_TCK"))


def process_state(pid: int) -> str | None:
    """The kernel's one-letter state of ``pid`` (``R``, ``S``, ``D``, ``T``,
    ``t``, ``Z``...), or None when it is gone."""
    found = stat(pid)
    return None if found is None else found[0]


#: Whether the kernel keeps per-thread children lists (``CONFIG_PROC_CHILDREN``).
HAS_CHILDREN = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


def children(pid: int) -> list[int]:
    """The children of ``pid``, from the kernel's per-thread lists
    (``HAS_CHILDREN`` says whether there are any); [] once it is gone."""
    found: list[int] = []
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in threads:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                found.extend(int(c) for c in f.read().split())
        except (OSError, ValueError):
            continue  # a thread that ended meanwhile
    return found


#: A process, safe from pid reuse: (pid, start time in clock ticks since boot).
Process = tuple[int, int]


def identify(pid: int) -> Process | None:
    found = stat(pid)
    return None if found is None or is_gone(found[0]) else (pid, found[2])


def alive(process: Process) -> bool:
    """Running or stopped (not a zombie), and not a reused pid."""
    found = stat(process[0])
    return found is not None and found[2] == process[1] and not is_gone(found[0])


def is_stopped(state: str | None) -> bool:
    return state in ("T", "t")


def is_gone(state: str | None) -> bool:
    return state is None or state in ("Z", "X")


def _identity(fd: int) -> tuple[int, int] | None:
    try:
        found = os.fstat(fd)
    except OSError:
        return None
    return found.st_dev, found.st_ino


class Ends:
    """Descriptors this process opened for itself (its ends of the keeper's
    pipes), each with its identity (device, inode): one the process closed
    behind our back (``os.closerange``) and reopened for something else, a
    user's file, is never read, written, changed or closed as ours.
    ``get(name)`` is the descriptor while it is still ours, else -1."""

    def __init__(self, **fds: int) -> None:
        self._fds = {name: (fd, _identity(fd)) for name, fd in fds.items()}

    def get(self, name: str) -> int:
        fd, identity = self._fds.get(name, (-1, None))
        return fd if fd >= 0 and identity is not None and _identity(fd) == identity else -1

    def add(self, name: str, fd: int) -> None:
        self._fds[name] = (fd, _identity(fd))

    def move_above(self, name: str, fd: int) -> None:
        """Give end ``name`` a number above ``fd`` (a dup; the old number
        closed: the open file description, and a pipe's count of writers,
        are unchanged). A dying process's files are released highest number
        first (this kernel; see ``containment``): a death pipe's read end
        numbered above the pipe's write end would be released, and its
        owner forgotten, before the writer's release signals the readers."""
        old = self.get(name)
        if 0 <= old < fd:
            self.add(name, fcntl.fcntl(old, fcntl.F_DUPFD_CLOEXEC, fd + 1))
            os.close(old)

    def close(self, *names: str) -> None:
        """Close the ends named that are still ours; forget the rest. No
        name closes nothing (``close_all`` closes every end): a caller whose
        list came out empty must not close the job's own death pipe, which
        would SIGKILL the job while it is armed."""
        for name in names:
            fd = self.get(name)
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._fds.pop(name, None)

    def close_all(self) -> None:
        self.close(*self._fds)

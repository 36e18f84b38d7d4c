"""The Linux kernel's ways to end a process that need nothing from it.

A Python signal handler or timer runs only when its interpreter gets the GIL
back, which a long C call (``json.loads``, ``list.sort``, most extensions)
delays for as long as it runs. These act in the kernel instead:

- ``KillTimer``: a POSIX timer (``timer_create`` on ``CLOCK_BOOTTIME``) that
  delivers SIGKILL to its own process at an absolute time, GIL held or not;
  re-arming it is one ~2 µs syscall. The keeper arms one on itself, so a
  keeper that is stuck dies on time.
- the *death pipe*: a pipe's read end set to ``O_ASYNC`` with the kernel's
  "I/O possible" signal replaced by SIGKILL (``F_SETSIG``): when the last
  writer (the keeper) dies, the reader (the job) is killed within
  milliseconds. ``set_death_pipe(fd, armed)`` turns it on and off (clearing
  ``O_ASYNC``, never closing: a close would count as the writer's death only
  for the other side, and an armed close races the keeper's exit).
- ``process_state``: a job stopped alone (SIGSTOP, a debugger: state ``T``)
  is not alive, and must not be renewed.

``available()`` is False where any of them is missing (macOS, the BSDs): the
keeper is then not used (see ``keeper_client``).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import fcntl
import os
import signal
import sys

from .clock import CLOCK_ID

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


def prepare_death_pipe(read_fd: int) -> int:
    """Make the kernel SIGKILL this process, not send SIGIO, when ``read_fd``
    becomes readable (its writer died), once ``set_death_pipe`` arms it.
    Returns the fd's flags, which ``set_death_pipe`` then sets in one call."""
    fcntl.fcntl(read_fd, fcntl.F_SETOWN, os.getpid())
    fcntl.fcntl(read_fd, F_SETSIG, signal.SIGKILL)
    return fcntl.fcntl(read_fd, fcntl.F_GETFL) & ~os.O_ASYNC


def set_death_pipe(read_fd: int, armed: bool, flags: int) -> None:
    fcntl.fcntl(read_fd, fcntl.F_SETFL, flags | os.O_ASYNC if armed else flags)


def widen_pipe(fd: int, size: int = 1 << 20) -> None:
    """Room for a burst of messages (best effort: the limit is a sysctl)."""
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, F_SETPIPE_SZ, size)


def process_state(pid: int) -> str | None:
    """The kernel's one-letter state of ``pid`` (``R``, ``S``, ``D``, ``T``,
    ``t``, ``Z``...), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
        return stat[stat.rindex(")") + 2]
    except (OSError, ValueError, IndexError):
        return None


def is_stopped(state: str | None) -> bool:
    return state in ("T", "t")


def is_gone(state: str | None) -> bool:
    return state is None or state in ("Z", "X")

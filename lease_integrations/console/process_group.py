"""Ending a command's whole process group: what ``leasectl run`` owns.

``leasectl run`` starts its command in a session (and so a process group) of
its own, so a terminal's Ctrl-C or a shell's job control reaches the command
only through ``leasectl``, which forwards it. The fail-stop ladder ends every
descendant it can find by parent links; a process the command started that
was handed to init (a double fork) but stayed in the command's group is out
of that walk's reach, and would go on working under a lease that is gone or
given back. Ending the group closes that gap: a member that also left the
group (``setsid``) is the one case no tool here reaches, as documented.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Collection

from ..keeper.descendants import group_alive

#: How often the group is looked at while it has its grace to end.
POLL = 0.01


def signal_group(pgid: int, signum: int) -> None:
    """Send ``signum`` to the group, if it still has a member."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def end_group(pgid: int, grace: float, *, also: Collection[int] = ()) -> None:
    """SIGTERM (and SIGCONT, for a stopped member) to every process of
    ``pgid`` and to the pids in ``also`` (descendants seen earlier that left
    the group); SIGKILL to whatever is left after ``grace`` seconds. A group
    whose members are all zombies (the command itself, not yet reaped by the
    thread waiting for it; a double-forked child init has not reaped yet)
    counts as ended: none of them runs."""
    others = {pid for pid in also if _alive(pid)}
    if not group_alive(pgid) and not others:
        return
    for signum in (signal.SIGTERM, signal.SIGCONT):
        signal_group(pgid, signum)
        _signal(others, signum)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        others = {pid for pid in others if _alive(pid)}
        if not others and (not group_alive(pgid) or _only_zombies(pgid)):
            return
        time.sleep(POLL)
    signal_group(pgid, signal.SIGKILL)
    _signal(others, signal.SIGKILL)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie has ended: only its parent's wait is left)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
        return stat[stat.rindex(")") + 2:].split()[0] not in ("Z", "X")
    except (OSError, ValueError, IndexError):
        return False


def _signal(pids: Collection[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def _only_zombies(pgid: int) -> bool:
    """Whether every remaining member of the group has ended, unreaped."""
    if not os.path.isdir("/proc"):
        return False
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().decode("ascii", "replace")
            fields = stat[stat.rindex(")") + 2:].split()
        except (OSError, ValueError):
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            return False
    return True

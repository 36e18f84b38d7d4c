"""Ending every process a job started: children, grandchildren, and those that
left our session or process group (``start_new_session=True``, as Airflow's
``SubprocessHook`` does), found by walking the parent links, not by group.

The tree is frozen (SIGSTOP) before anything is ended, because a parent that
dies first hands its children to init, where no walk from us can find them:
frozen, nothing forks and nothing is orphaned while we collect the set. Each
process is known by (pid, start time), so a pid reused meanwhile by an
unrelated process is never signalled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time

#: (pid, start time in clock ticks since boot): a process's identity.
Process = tuple[int, int]


def _table() -> dict[int, tuple[int, int, str]]:
    """pid -> (parent pid, start time, state) of every process we can see."""
    table: dict[int, tuple[int, int, str]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return _table_from_ps()
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().decode("ascii", "replace")
        except OSError:
            continue  # gone meanwhile
        fields = stat[stat.rindex(")") + 2:].split()  # the name may hold spaces or ')'
        table[int(name)] = (int(fields[1]), int(fields[19]), fields[0])
    return table


def _table_from_ps() -> dict[int, tuple[int, int, str]]:
    """Where there is no /proc (macOS): the same from ``ps`` (no start time)."""
    out = subprocess.run(["ps", "-A", "-o", "pid=,ppid=,stat="], capture_output=True,
                         text=True, check=False).stdout
    table = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0].isdigit() and parts[1].isdigit():
            table[int(parts[0])] = (int(parts[1]), 0, parts[2][:1])
    return table


def descendants(*roots: int) -> set[Process]:
    """Every live (not zombie) process below ``roots`` (default: this process)."""
    table = _table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found: set[Process] = set()
    todo = [child for root in roots or (os.getpid(),) for child in children.get(root, [])]
    while todo:
        pid = todo.pop()
        _, started, state = table[pid]
        if state not in ("Z", "X"):
            found.add((pid, started))
        todo.extend(children.get(pid, []))
    return found


def _alive(process: Process) -> bool:
    """Still running, and still the process we found (not a reused pid)."""
    pid, started = process
    table_entry = _stat(pid)
    return table_entry is not None and table_entry[1] == started and table_entry[2] not in "ZX"


def _stat(pid: int) -> tuple[int, int, str] | None:
    if not os.path.isdir("/proc"):
        return _table_from_ps().get(pid)
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[1]), int(fields[19]), fields[0]


def _signal(processes: set[Process], signum: int) -> None:
    for process in processes:
        if _alive(process):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(process[0], signum)


def freeze(root: int | None = None) -> set[Process]:
    """SIGSTOP the whole tree below us (or ``root`` and its tree), walking again
    until no new process shows up (one may fork between a walk and its SIGSTOP)."""
    frozen: set[Process] = set()
    roots = () if root is None else (root,)
    if root is not None:
        stat = _stat(root)
        if stat is not None and stat[2] not in "ZX":
            frozen.add((root, stat[1]))
            _signal(frozen, signal.SIGSTOP)
    for _ in range(50):  # bounded: a tree that grows faster than we walk is ended anyway
        new = descendants(*roots) - frozen
        if not new:
            break
        _signal(new, signal.SIGSTOP)
        frozen |= new
    return frozen


def end_descendants(grace: float, root: int | None = None) -> int:
    """Freeze every descendant (or ``root`` and its descendants), then SIGTERM
    (and SIGCONT, so a stopped process can act on it), wait up to ``grace``
    seconds, SIGKILL whatever is left. Returns how many processes there were."""
    tree = freeze(root)
    if not tree:
        return 0
    _signal(tree, signal.SIGTERM)
    _signal(tree, signal.SIGCONT)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_alive(p) for p in tree):
        time.sleep(0.01)
    for _ in range(3):  # a SIGTERM handler may have started more: end those too
        tree |= descendants(*[pid for pid, _ in tree])
        left = {p for p in tree if _alive(p)}
        if not left:
            break
        _signal(left, signal.SIGKILL)
    return len(tree)


def end_after_exit(tree: set[Process], grace: float) -> None:
    """End a frozen ``tree`` from a small shell process, after this one has
    exited: a child's death would wake a thread of ours that waits for it
    (``Popen.wait``), and that thread would run on. Frozen, the tree does no
    work meanwhile; the shell sends SIGTERM and SIGCONT, then SIGKILL after
    ``grace`` seconds to whatever is left."""
    pids = " ".join(str(pid) for pid, _ in tree if _alive((pid, _)))
    if not pids:
        return
    script = (f"kill -TERM {pids}; kill -CONT {pids}; i=0; "
              f"while [ $i -lt {max(1, int(grace * 100))} ] && kill -0 {pids}; "
              f"do sleep 0.01; i=$((i+1)); done; kill -KILL {pids}")
    subprocess.Popen(["/bin/sh", "-c", script], start_new_session=True,
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL)

"""Ending every process a job started: children, grandchildren, and those that
left our session or process group (``start_new_session=True``, as Airflow's
``SubprocessHook`` does), found by walking the parent links, not by group.

The tree is frozen (SIGSTOP) first, walking again until nothing new shows up:
a parent that died first would hand its children to init, out of our walk's
reach, and a frozen process neither forks nor exits, so its pid stays its
own. A small shell then ends the frozen set, once the caller has exited if
it is exiting: a child's death would wake a thread of ours that waits for it
(``Popen.wait``), and that thread would run on.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess


def _parents() -> dict[int, int]:
    """pid -> parent pid of every live (not zombie) process we can see."""
    if not os.path.isdir("/proc"):  # macOS and the BSDs
        out = subprocess.run(["ps", "-A", "-o", "pid=,ppid=,stat="], capture_output=True,
                             text=True, check=False).stdout
        rows = [line.split() for line in out.splitlines()]
        return {int(r[0]): int(r[1]) for r in rows if len(r) >= 3 and not r[2].startswith("Z")}
    parents = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().decode("ascii", "replace")
            state, ppid = stat[stat.rindex(")") + 2:].split()[:2]  # the name may hold ')'
        except (OSError, ValueError):
            continue  # gone meanwhile (an exiting process may show an empty stat)
        if state not in ("Z", "X"):
            parents[int(name)] = int(ppid)
    return parents


def descendants(*roots: int) -> set[int]:
    """Every live process below ``roots`` (default: this process)."""
    children: dict[int, list[int]] = {}
    for pid, ppid in _parents().items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    todo = [child for root in roots or (os.getpid(),) for child in children.get(root, [])]
    while todo:
        pid = todo.pop()
        found.add(pid)
        todo.extend(children.get(pid, []))
    return found


def _signal(pids: set[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def freeze(root: int | None = None, *, known: set[int] = frozenset()) -> set[int]:  # type: ignore[assignment]
    """SIGSTOP every process below us (or ``root`` and every process below
    it), walking until no new one shows up; returns the frozen set. ``known``
    pids found earlier are frozen too, with their trees, if still alive: a
    stop hook may have ended their parent meanwhile, handing them to init."""
    frozen = set() if root is None else {root}
    alive = set(_parents())
    frozen |= known & alive
    _signal(frozen, signal.SIGSTOP)
    roots = tuple(frozen) if root is not None else (os.getpid(), *frozen)
    for _ in range(50):  # bounded: a tree that outgrows the walk is still ended by SIGKILL
        new = descendants(*roots, *frozen) - frozen
        if not new:
            break
        _signal(new, signal.SIGSTOP)
        frozen |= new
    return frozen


def end_frozen(pids: set[int], grace: float, *, after_we_exit: bool = False) -> None:
    """From a small shell of its own: SIGTERM and SIGCONT to ``pids`` (frozen),
    then SIGKILL once none is left or ``grace`` seconds have passed. With
    ``after_we_exit`` the shell first waits for this process to end (its
    stdin, a pipe only we hold, closes then), so no thread of ours can wake."""
    if not pids:
        return
    listed = " ".join(map(str, sorted(pids)))
    ticks = max(1, int(grace * 100))
    script = (f"read -r _; kill -TERM {listed}; kill -CONT {listed}; i=0; "
              f"while [ $i -lt {ticks} ] && kill -0 {listed}; do sleep 0.01; i=$((i+1)); done; "
              f"kill -KILL {listed}")
    shell = subprocess.Popen(["/bin/sh", "-c", script], start_new_session=True,
                             stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    if not after_we_exit:
        assert shell.stdin is not None
        shell.stdin.close()

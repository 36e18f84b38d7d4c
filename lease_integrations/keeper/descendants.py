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
from collections.abc import Iterable

from . import kernel

#: Seconds between looks at a job's tree while a fail-stop block runs (the
#: keeper's snapshot; the job's look for groups of its own below it): a
#: process started less than this before the job or its keeper dies can
#: escape (see docs/concepts/loss.md).
SNAPSHOT_EVERY = 0.25


def group_alive(pgid: int) -> bool:
    """Whether any process (a zombie not yet reaped included) is in ``pgid``."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member changed its user: still there
        return True
    return True


def _children_map() -> dict[int, list[int]]:
    """parent pid -> the live (not zombie) processes it is the parent of."""
    if not os.path.isdir("/proc"):  # macOS and the BSDs
        out = subprocess.run(["ps", "-A", "-o", "pid=,ppid=,stat="], capture_output=True,
                             text=True, check=False).stdout
        rows = [line.split() for line in out.splitlines()]
        pairs = [(int(r[0]), int(r[1])) for r in rows if len(r) >= 3 and not r[2].startswith("Z")]
    else:
        pairs = []
        for name in os.listdir("/proc"):
            found = kernel.stat(int(name)) if name.isdigit() else None
            if found is not None and not kernel.is_gone(found[0]):
                pairs.append((int(name), found[1]))
    children: dict[int, list[int]] = {}
    for pid, ppid in pairs:
        children.setdefault(ppid, []).append(pid)
    return children


def descendants(*roots: int) -> set[int]:
    """Every live process below ``roots`` (default: this process). Read from
    the kernel's children lists where it keeps them: the cost is the tree's
    size, not the host's, so the keeper can take one every tick."""
    if kernel.HAS_CHILDREN:
        def below(pid: int) -> list[int]:  # the kernel lists zombies too: not ours to end
            return [c for c in kernel.children(pid)
                    if not kernel.is_gone(kernel.process_state(c))]
    else:
        mapping = _children_map()
        below = lambda pid: mapping.get(pid, [])  # type: ignore[misc]  # noqa: E731
    found: set[int] = set()
    todo = [child for root in roots or (os.getpid(),) for child in below(root)]
    while todo:
        pid = todo.pop()
        if pid in found:
            continue
        found.add(pid)
        todo.extend(below(pid))
    return found


def signal_all(pids: set[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def freeze(root: int | None = None, *, below: int | None = None,
           known: Iterable[int] = (), spare: Iterable[int] = ()) -> set[int]:
    """SIGSTOP ``root`` and every process below it (or every process below
    ``below``, default this process, not ``below`` itself), walking until no
    new one shows up; returns the frozen set. ``known`` pids found earlier
    are frozen too, with their trees, if still alive: a stop hook, or the
    job's death, may have ended their parent meanwhile, handing them to
    init. ``spare`` (the keeper itself) is never frozen."""
    top = root if root is not None else below if below is not None else os.getpid()
    spared = set(spare)
    frozen = {pid for pid in known if not kernel.is_gone(kernel.process_state(pid))}
    frozen = (frozen | ({root} if root is not None else set())) - spared
    signal_all(frozen, signal.SIGSTOP)
    for _ in range(50):  # bounded: a tree that outgrows the walk is still ended by SIGKILL
        new = descendants(top, *frozen) - frozen - spared
        if not new:
            break
        signal_all(new, signal.SIGSTOP)
        frozen |= new
    return frozen


def end_frozen(pids: set[int], grace: float, *, after_we_exit: bool = False,
               born_in: tuple[int, int] | None = None) -> subprocess.Popen[bytes] | None:
    """From a small shell of its own: SIGTERM and SIGCONT to ``pids`` (frozen),
    then SIGKILL once none is left or ``grace`` seconds have passed. With
    ``after_we_exit`` the shell first waits for this process to end (its
    stdin, a pipe only we hold, closes then), so no thread of ours can wake;
    else it starts at once, and ``.wait()`` on the shell waits for the end.

    ``born_in`` (group, ticks): once the job has ended, every process of
    its group started since ``ticks`` (``kernel.ticks_now`` at the freeze)
    is frozen and ended too: the job's threads run on through its ladder,
    and a child one starts after the freeze is out of the frozen set (and,
    once the job is gone, out of any walk). Only those: a process of that
    group the job did not start (a shell's ``job | logger``) started before
    the job's ladder, and is not the job's to end."""
    if not pids and born_in is None:
        return None
    ticks = max(1, int(grace * 100))
    late = ""
    if born_in is not None:  # /proc/PID/stat after the name: $3 the group, ${20} the start
        late = (f"n=0; while [ $n -lt 50 ]; do new=; for f in /proc/[0-9]*/stat; do "
                f"read -r l < \"$f\" 2>/dev/null || continue; set -- ${{l##*) }}; "
                f"[ \"$3\" = {born_in[0]} ] && [ \"${{20}}\" -ge {born_in[1]} ] || continue; "
                f"p=${{f%/stat}}; p=${{p#/proc/}}; case \" $listed \" in *\" $p \"*) ;; "
                f"*) new=\"$new $p\";; esac; done; [ -z \"$new\" ] && break; "
                f"kill -STOP $new; listed=\"$listed $new\"; n=$((n+1)); done; ")
    script = (f"read -r _; listed='{' '.join(map(str, sorted(pids)))}'; {late}"
              f"kill -TERM $listed; kill -CONT $listed; i=0; "
              f"while [ $i -lt {ticks} ]; do a=; for p in $listed; do kill -0 $p && a=1; done; "
              f"[ -z \"$a\" ] && break; sleep 0.01; i=$((i+1)); done; kill -KILL $listed")
    shell = subprocess.Popen(["/bin/sh", "-c", script], start_new_session=True,
                             stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    if not after_we_exit:
        assert shell.stdin is not None
        shell.stdin.close()
    return shell

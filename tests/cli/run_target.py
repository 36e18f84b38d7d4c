"""Commands for the ``leasectl run`` tests, run under it as real programs:
``python run_target.py MODE OUT_DIR``.

``stamp``: append a start line and an end line (token, pid, monotonic ns) to
OUT_DIR/stamps, a moment apart: two commands that overlapped show it there.
``marker``: create OUT_DIR/ran (a run that must not start leaves none).
``tree``: start a child in the command's process group, a grandchild handed
to init (a double fork) that stays in the group, and a child in a session of
its own; write every pid to OUT_DIR/pids, then wait to be ended.
``alive``: write to OUT_DIR/alive which pids of OUT_DIR/pids still run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

#: How long a ``stamp`` run holds between its two lines: long enough that a
#: second run started at the same moment would overlap it.
STAMP_WORK = 0.3
FOREVER = 600.0


def put(out: Path, name: str, text: str) -> None:
    tmp = out / f".{name}.{os.getpid()}.tmp"
    tmp.write_text(text)
    os.replace(tmp, out / name)


def running(pid: int) -> bool:
    """Whether ``pid`` can run: not gone, not a zombie, not frozen (``T``)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:].split()[0] not in ("Z", "X", "T")


def stamp(out: Path) -> None:
    token = os.environ["LEASE_TOKEN"]
    with open(out / "stamps", "a") as f:
        f.write(f"start {token} {os.getpid()} {time.monotonic_ns()}\n")
        f.flush()
        time.sleep(STAMP_WORK)  # the work itself, not a synchronisation
        f.write(f"end {token} {os.getpid()} {time.monotonic_ns()}\n")


def sleeper() -> list[str]:
    return [sys.executable, "-c", f"import time; time.sleep({FOREVER})"]


def tree(out: Path) -> None:
    child = subprocess.Popen(sleeper())  # our group
    apart = subprocess.Popen(sleeper(), start_new_session=True)  # a session of its own
    read, write = os.pipe()
    first = os.fork()
    if first == 0:  # the double fork: the grandchild is handed to init, in our group
        if os.fork() == 0:
            os.close(read)
            os.write(write, f"{os.getpid()}\n".encode())
            os.close(write)
            time.sleep(FOREVER)
            os._exit(0)
        os._exit(0)
    os.close(write)
    os.waitpid(first, 0)
    with os.fdopen(read) as pipe:
        orphan = int(pipe.readline())
    put(out, "pids", f"{os.getpid()} {child.pid} {apart.pid} {orphan}")
    time.sleep(FOREVER)


def main(mode: str, out: Path) -> None:
    if mode == "stamp":
        stamp(out)
    elif mode == "marker":
        put(out, "ran", os.environ.get("LEASE_TOKEN", ""))
    elif mode == "tree":
        tree(out)
    elif mode == "alive":  # which of another run's processes still run as this one starts
        pids = [int(p) for p in (out / "pids").read_text().split()]
        put(out, "alive", " ".join(str(p) for p in pids if running(p)) or "none")
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))

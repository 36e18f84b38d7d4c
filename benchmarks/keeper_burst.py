"""A burst of holders: 32 processes take a lease each at the same moment
(ttl 6) beside 2 processes that keep both cores busy, hold it for 2.5 ttls
and give it back. Counts the holders that lost a healthy lease (exit 75) and
the memory everything the library started beside them takes (PSS of their
keepers, wherever they run, and of the fork server they were forked from),
with keepers forked from the server (the default), spawned one per holder
(``LEASE_KEEPER=spawn``), and none (``LEASE_KEEPER=off``: the in-process
heartbeat), side by side. The first burst of a run may find no server: its
first holders spawn their keepers while one starts.

    .venv/bin/python -m benchmarks.keeper_burst [--holders 32] [--bursts 3] [--stores sqlite,redis]

Targets: 0 lost in every burst; at most 320 MiB PSS beside 32 holders.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from benchmarks import local_servers
from benchmarks.tables import table

ROOT = Path(__file__).resolve().parents[1]
TTL = 6.0
HOLD_FOR = 2.5 * TTL

HOLDER = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from lease_integrations import LeaseLock, connect
    url, key, ready, stop = sys.argv[1:5]
    store = connect(url)
    with LeaseLock(store, key, ttl=float(sys.argv[5])).hold():
        Path(ready).touch()
        while not os.path.exists(stop):
            time.sleep(0.05)
""")
BUSY = "while True: pass"
#: LEASE_KEEPER -> what the table calls it
MODES = (("fork", "keeper, forked"), ("spawn", "keeper, spawned"), ("off", "in process"))


def children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found += [int(p) for p in f.read().split()]
    except OSError:
        pass
    return found


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def watched(pid: int) -> set[int]:
    """The processes ``pid`` holds a pidfd of (a forked keeper: its job)."""
    found: set[int] = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return found
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:[pidfd]":
                with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                    found |= {int(line.split()[1]) for line in f if line.startswith("Pid:")}
        except (OSError, ValueError, IndexError):
            continue
    return found


def parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def started_by_library(holders: list[int]) -> list[int]:
    """The holders' keepers (their children, or keepers forked from a fork
    server that watch them) and the fork servers those came from."""
    wanted = set(holders)
    found = {c for h in holders for c in children(h)}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and sys.executable in (line := cmdline(int(entry))) \
                and "lease_integrations.keeper.process --fork-server" in line \
                and watched(int(entry)) & wanted:
            found |= {int(entry), parent(int(entry))}
    return sorted(found - {0, 1})


def pss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def burst(url: str, holders: int, keeper: str, work: Path) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("LEASE_STORE_URL", None)
    env["LEASE_KEEPER"] = keeper
    stop = work / "stop"
    stop.unlink(missing_ok=True)
    tag = f"{int(time.time() * 1000)}-{keeper}"
    readies = [work / f"ready-{tag}-{i}" for i in range(holders)]
    errors = [work / f"stderr-{tag}-{i}" for i in range(holders)]
    procs = []
    for i, (ready, error) in enumerate(zip(readies, errors)):
        with open(error, "wb") as stderr:
            procs.append(subprocess.Popen(
                [sys.executable, "-c", HOLDER, url, f"burst-{tag}-{i}", str(ready), str(stop),
                 str(TTL)], env=env, stdout=subprocess.DEVNULL, stderr=stderr))
    started = time.monotonic()
    deadline = started + 60
    while time.monotonic() < deadline and not all(r.exists() or p.poll() is not None
                                                  for r, p in zip(readies, procs)):
        time.sleep(0.05)
    all_ready = time.monotonic() - started
    # Memory once every holder holds (its keeper running); then hold on.
    time.sleep(1.0)
    ours = started_by_library([p.pid for p in procs])
    pss = sum(pss_kib(c) for c in ours) / 1024
    end = started + HOLD_FOR
    while time.monotonic() < end:
        time.sleep(0.1)
    stop.touch()
    codes = [p.wait(timeout=60) for p in procs]
    for code, error in zip(codes, errors):
        if code != 0:  # what a holder that did not end well said, so a row can be explained
            lines = error.read_text(errors="replace").strip().splitlines()
            print(f"holder exited {code} ({keeper}): " + " | ".join(lines[-3:]), file=sys.stderr)
    return {"lost": sum(c == 75 for c in codes), "other": sum(c not in (0, 75) for c in codes),
            "ready_s": all_ready, "pss_mib": pss, "processes": len(ours)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--holders", type=int, default=32)
    parser.add_argument("--bursts", type=int, default=3)
    parser.add_argument("--stores", default="sqlite,redis")
    parser.add_argument("--modes", default=",".join(mode for mode, _ in MODES),
                        help="LEASE_KEEPER values to compare (fork, spawn, off)")
    args = parser.parse_args()
    modes = [(mode, name) for mode, name in MODES if mode in args.modes.split(",")]
    rows = []
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="lease-burst-") as tmp:
        work = Path(tmp)
        busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(2)]
        stack.callback(lambda: [b.kill() or b.wait() for b in busy])
        for kind in args.stores.split(","):
            url = (f"sqlite:///{work}/leases.db" if kind == "sqlite"
                   else stack.enter_context(local_servers.redis_server()))
            for n in range(args.bursts):
                for keeper, name in modes:
                    r = burst(url, args.holders, keeper, work)
                    rows.append([kind, n + 1, name,
                                 f"{r['lost']}/{args.holders}", r["other"],
                                 f"{r['ready_s']:.1f}", r["processes"], f"{r['pss_mib']:.0f}"])
                    print(*rows[-1], sep="\t", flush=True)
    print(table("a burst of holders (ttl 6, 2 busy processes)",
                ["store", "burst", "renewer", "lost", "other exits", "all held after s",
                 "processes started", "their PSS MiB"], rows))


if __name__ == "__main__":
    main()

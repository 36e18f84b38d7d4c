"""The job of the containment tests (issue 39), a real process.

    python -m tests.keeper.contained_job URL KEY STAMPS --ttl S [--fault closerange|execv]
        [--session] [--hog-descriptors N] [--fork-forever]

Run in a process group of its own (as Airflow's and Prefect's task runners
start a task). It holds ``KEY`` with ``hold()`` (``on_lost="exit"``) and,
inside the block, starts a ``subprocess`` child and a ``multiprocessing``
child (the platform's default start method) that each append ``WHO MONOTONIC``
to ``STAMPS`` every 20 ms, forever; it prints ``held MONOTONIC TOKEN PID``,
waits for a line on stdin, then (``--fault``) closes every descriptor from 3
up or replaces itself with ``execv`` by a program that stamps as ``exec``,
and stamps as ``job`` itself until it is stopped. Each stamp opens, writes
and closes the file: closing the descriptors does not stop the writing.
``--fork-forever``: from the line on stdin, a thread of the job forks a
child every 50 ms (at most 100) that stamps as ``late-PID``, until the job
ends: children born during the ladder, after any freeze.
``time.monotonic()`` is one clock for the host: the test compares the stamps
with the contender's grant."""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import threading
import time

from lease_integrations import LeaseLock, connect

STAMP = ("import os, sys, time\n"
         "while True:\n"
         "    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)\n"
         "    os.write(fd, f'{sys.argv[2]} {time.monotonic()}\\n'.encode())\n"
         "    os.close(fd)\n"
         "    time.sleep(0.02)\n")


def stamp_forever(path: str, who: str) -> None:
    while True:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.write(fd, f"{who} {time.monotonic()}\n".encode())
        os.close(fd)
        time.sleep(0.02)


def fork_forever(path: str) -> None:
    for _ in range(100):
        if os.fork() == 0:
            try:
                stamp_forever(path, f"late-{os.getpid()}")
            finally:
                os._exit(0)
        time.sleep(0.05)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("key")
    p.add_argument("stamps")
    p.add_argument("--ttl", type=float, default=5.0)
    p.add_argument("--fault", choices=["none", "closerange", "execv"], default="none")
    p.add_argument("--session", action="store_true",
                   help="start the subprocess child in a session of its own (as Airflow's "
                        "SubprocessHook does), with a child of its own there")
    p.add_argument("--hog-descriptors", type=int, default=0,
                   help="open this many descriptors inside the block first, so that what "
                        "the library opens later gets numbers above its own pipes' ends")
    p.add_argument("--fork-forever", action="store_true",
                   help="a thread forks a stamping child every 50 ms until the job ends")
    args = p.parse_args()
    lock = LeaseLock(connect(args.url), args.key, ttl=args.ttl)
    with lock.hold() as lease:
        hogs = [os.open(os.devnull, os.O_RDONLY) for _ in range(args.hog_descriptors)]
        del hogs  # held for the process's life: plain numbers, never collected
        if args.session:  # "sub" in its own session, and "subsub" below it in that group
            starter = (f"import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', "
                       f"{STAMP!r}, {args.stamps!r}, 'subsub'])\nexec({STAMP!r})")
            subprocess.Popen([sys.executable, "-c", starter, args.stamps, "sub"],
                             start_new_session=True)
        else:
            subprocess.Popen([sys.executable, "-c", STAMP, args.stamps, "sub"])
        multiprocessing.Process(target=stamp_forever, args=(args.stamps, "mp"), daemon=True).start()
        print("held", time.monotonic(), lease.token, os.getpid(), flush=True)
        sys.stdin.readline()
        if args.fork_forever:
            threading.Thread(target=fork_forever, args=(args.stamps,), daemon=True).start()
        if args.fault == "closerange":
            os.closerange(3, 1 << 16)
        elif args.fault == "execv":
            os.execv(sys.executable, [sys.executable, "-c", STAMP, args.stamps, "exec"])
        stamp_forever(args.stamps, "job")


if __name__ == "__main__":
    main()

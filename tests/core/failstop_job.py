"""A job that holds a lease with ``on_lost="exit"`` (the default) in one of the
shapes that preemptive interruption could not stop, and leaves evidence of its
work in a directory: ``ticks`` (one wall-clock time per line, from every
thread and child process while it works) and ``lost`` (when the lease's
``on_lost`` callback ran: the moment the loss was known).

    python -m tests.core.failstop_job URL KEY SHAPE DIR [--ttl S] [--self-break]

Shapes:
- ``threads``: the block fans out to ``ThreadPoolExecutor(4)`` and waits;
- ``c-call``: the block runs on a worker thread inside ``time.sleep(20)``;
- ``child``: the block starts a child in its own session (which starts a
  grandchild) and waits for it;
- ``main-sleep`` / ``socket-read``: the main thread in a sleep or a read;
- ``mixed``: two worker threads and the child (and grandchild) at once;
- ``hook-ends-child``: as ``child``, with a stop hook that ends the child (as
  a ``BashOperator``'s ``on_kill`` ends its command): the waiting main thread
  wakes and the block ends while the ladder runs, and the grandchild, in a
  session of its own, is orphaned to init before the tree is frozen.
- ``no-new-threads``: as ``child``, then no thread can be started any more,
  as Python 3.12 refuses them once the interpreter is ending (a stop hook
  that ends what the main thread waits for lets it end the interpreter
  while the ladder runs): every bounded step of the ladder is then refused.
Prints ``held TOKEN PID...`` (the job's descendants) once all work runs.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from lease_integrations import Lease, LeaseLock, connect
from lease_integrations.keeper import stop_hook

#: A child process that ticks, and starts a grandchild that ticks too.
TICKER = """
import os, subprocess, sys, time
path, depth = sys.argv[1], int(sys.argv[2])
if depth:
    subprocess.Popen([sys.executable, "-c", sys.argv[3], path, "0", ""], start_new_session=True,
                     stdout=subprocess.DEVNULL)
fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
while True:
    os.write(fd, f"{time.time():.6f} child{depth}\\n".encode())
    time.sleep(0.02)
"""


def tick(fd: int, who: str) -> None:
    os.write(fd, f"{time.time():.6f} {who}\n".encode())


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("key")
    p.add_argument("shape")
    p.add_argument("dir", type=Path)
    p.add_argument("--ttl", type=float, default=3.0)
    p.add_argument("--self-break", action="store_true",
                   help="break the lease from a thread of this process (memory://)")
    args = p.parse_args()
    store = connect(args.url)
    ticks = os.open(args.dir / "ticks", os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    working = threading.Barrier({"threads": 5, "mixed": 3}.get(args.shape, 2))

    def record_loss(lease: Lease) -> None:
        (args.dir / "lost").write_text(f"{time.time():.6f}")

    def started(lease: Lease, pids: list[int]) -> None:
        global STARTED
        STARTED = True
        print("held", lease.token, *pids, flush=True)
        if args.self_break:
            threading.Thread(target=lambda: store.force_release(args.key, "test"),
                             daemon=True).start()

    def work(who: str) -> None:
        working.wait()
        while True:
            tick(ticks, who)
            time.sleep(0.02)

    lock = LeaseLock(store, args.key, ttl=args.ttl)
    if args.shape == "c-call":
        def held_on_a_worker() -> None:
            with lock.hold() as lease:
                lease.on_lost(record_loss)
                tick(ticks, "before-sleep")
                started(lease, [])
                time.sleep(20)
                tick(ticks, "after-sleep")
        thread = threading.Thread(target=held_on_a_worker)
        thread.start()
        thread.join()
    else:
        with lock.hold() as lease:
            lease.on_lost(record_loss)
            if args.shape == "threads":
                with ThreadPoolExecutor(4) as pool:
                    for i in range(4):
                        pool.submit(work, f"thread{i}")
                    working.wait()
                    started(lease, [])
            elif args.shape in ("child", "mixed", "hook-ends-child", "no-new-threads"):
                pool = ThreadPoolExecutor(2)
                if args.shape == "mixed":
                    for i in range(2):
                        pool.submit(work, f"thread{i}")
                    working.wait()
                child = subprocess.Popen([sys.executable, "-c", TICKER, str(args.dir / "ticks"),
                                          "1", TICKER], start_new_session=True,
                                         stdout=subprocess.DEVNULL)
                while not {"child0", "child1"} <= set((args.dir / "ticks").read_text().split()):
                    time.sleep(0.01)  # until the child and the grandchild both tick
                from lease_integrations.keeper.descendants import descendants
                started(lease, sorted(descendants()))
                if args.shape == "hook-ends-child":
                    with stop_hook(child.kill):
                        child.wait()
                elif args.shape == "no-new-threads":
                    def refuse(self: threading.Thread) -> None:
                        raise RuntimeError("can't create new thread at interpreter shutdown")

                    threading.Thread.start = refuse  # type: ignore[method-assign]
                    child.wait()
                else:
                    child.wait()
            elif args.shape == "main-sleep":
                started(lease, [])
                time.sleep(30)
            elif args.shape == "socket-read":
                reader, _writer = socket.socketpair()
                started(lease, [])
                reader.recv(1)
            tick(ticks, "block-ended")
    print("the block ended", flush=True)
    sys.exit(0)


STARTED = False

if __name__ == "__main__":
    try:
        main()
    except BaseException:
        if STARTED:  # the block ended while fail-stop ran: the interpreter's own exit path
            raise
        # A job broken before it started must not hang on its work threads.
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)

"""The keeper tests' job and contender, each a real process.

    python -m tests.keeper.keeper_job hold URL KEY [options]   the job
    python -m tests.keeper.keeper_job contend URL KEY           a contender

The job holds ``KEY`` with ``LeaseLock(connect(URL), KEY, ttl).hold()`` (the
default ``on_lost="exit"``) and inside the block, in this order: starts
``--threads`` busy Python threads, a child shell in a session of its own with
a ``sleep`` grandchild (``--children``), prints ``held``, keeps the GIL for
``--gil`` seconds in one C call (``ctypes.PyDLL(None).sleep``: the GIL is not
released), then sleeps ``--sleep`` seconds with the GIL released; with ``--wait-go``
the work waits for a line on stdin (sent once the keeper has the lease). It prints
one line per step, ``WORD MONOTONIC ...``, flushed: ``held TOKEN PID``,
``call-start``, ``call-end``, ``block-ended``; with ``--print-secret`` also
``secret SECRET`` (for the test that looks for it in the keeper's /proc).

``--log-blocks`` adds a logging handler (WARNING and up, on the root logger)
whose ``emit`` never returns; ``--callback-hangs`` an ``on_lost`` callback
that never returns: the ladder steps that must not delay the hard stop.

The contender prints ``ready``, waits for a line on stdin, then tries to
acquire every 50 ms; on a grant it prints ``granted TOKEN TRIED_AT GOT_AT`` (the
monotonic times its successful attempt began and returned: the grant came no
earlier than the first, and before the second) and releases and exits."""

from __future__ import annotations

import argparse
import ctypes
import logging
import os
import subprocess
import sys
import threading
import time

from lease_integrations import LeaseBusy, LeaseLock, connect
from tests.keeper.keeper_observe import children, poll


def say(*words: object) -> None:
    print(*words, flush=True)


class Blocks(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        threading.Event().wait()


def busy(start: threading.Event, stop: threading.Event) -> None:
    start.wait()
    n = 0
    while not stop.is_set():
        n += 1


def hold(args: argparse.Namespace) -> None:
    if args.log_blocks:
        logging.getLogger().addHandler(Blocks(logging.WARNING))
    store = connect(args.url)
    lock = LeaseLock(store, args.key, ttl=args.ttl)
    start, stop = threading.Event(), threading.Event()
    with lock.hold() as lease:
        if args.callback_hangs:
            lease.on_lost(lambda _lease: threading.Event().wait())
        for _ in range(args.threads):
            threading.Thread(target=busy, args=(start, stop), daemon=True).start()
        if args.children:
            child = subprocess.Popen(["sh", "-c", "sleep 600 & wait"], start_new_session=True)
            poll(lambda: children(child.pid), 10, "the child's sleep grandchild")
        if args.print_secret:
            say("secret", lease.secret)
        say("held", time.monotonic(), lease.token, os.getpid())
        start.set()  # all started: now busy (started busy, each start waits ~a second)
        if args.wait_go:
            sys.stdin.readline()
            say("go", time.monotonic())
        if args.busy_first:
            until = time.monotonic() + args.busy_first
            while time.monotonic() < until:  # Python code, beside the busy threads
                pass
        if args.gil:
            say("call-start", time.monotonic())
            ctypes.PyDLL(None).sleep(args.gil)
            say("call-end", time.monotonic())
        if args.sleep:
            time.sleep(args.sleep)
        stop.set()
    say("block-ended", time.monotonic())


def contend(args: argparse.Namespace) -> None:
    store = connect(args.url)
    lock = LeaseLock(store, args.key, ttl=args.ttl, on_lost="check")
    say("ready", time.monotonic())
    sys.stdin.readline()
    while True:
        tried_at = time.monotonic()
        try:
            lease = lock.acquire(wait=0)
        except LeaseBusy:
            time.sleep(0.05)
            continue
        say("granted", lease.token, tried_at, time.monotonic())
        lock.release(lease)
        return


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["hold", "contend"])
    p.add_argument("url")
    p.add_argument("key")
    p.add_argument("--ttl", type=float, default=2.0)
    p.add_argument("--gil", type=int, default=0, help="seconds in one call that keeps the GIL")
    p.add_argument("--sleep", type=float, default=0.0, help="then seconds with the GIL released")
    p.add_argument("--busy-first", type=float, default=0.0,
                   help="seconds of Python code before the call, beside the threads")
    p.add_argument("--threads", type=int, default=0, help="busy Python threads in the block")
    p.add_argument("--children", action="store_true")
    p.add_argument("--print-secret", action="store_true")
    p.add_argument("--wait-go", action="store_true",
                   help="after 'held', wait for a line on stdin before the work")
    p.add_argument("--log-blocks", action="store_true")
    p.add_argument("--callback-hangs", action="store_true")
    args = p.parse_args()
    hold(args) if args.mode == "hold" else contend(args)


if __name__ == "__main__":
    main()

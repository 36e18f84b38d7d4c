"""The job of the release-order test (issue 39), a real process.

    python -m tests.keeper.release_order_job URL KEY STAMPS TTL

Holds ``KEY-other`` with ``acquire()`` (a healthy lease of the process), then
``KEY`` with ``hold()`` (``on_lost="exit"``); inside the block it starts a
child that reads ``KEY-other`` from the store in a tight loop and appends
``held`` to ``STAMPS`` while it sees it held, ``free`` once it sees it not
held (released while the child still ran: what the test looks for); then
prints ``held ...`` and waits to be stopped."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from lease_integrations import LeaseLock, connect

WATCH = ("import os, sys\n"
         "from lease_integrations import connect\n"
         "store = connect(sys.argv[2])\n"
         "while True:\n"
         "    record = store.get(sys.argv[3])\n"
         "    seen = b'held\\n' if record is not None and record.held else b'free\\n'\n"
         "    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)\n"
         "    os.write(fd, seen)\n"
         "    os.close(fd)\n")


def main() -> None:
    url, key, stamps, ttl = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    store = connect(url)
    other = LeaseLock(store, f"{key}-other", ttl=ttl).acquire()
    with LeaseLock(store, key, ttl=ttl).hold() as lease:
        subprocess.Popen([sys.executable, "-c", WATCH, stamps, url, f"{key}-other"])
        while not os.path.exists(stamps):
            time.sleep(0.01)
        print("held", time.monotonic(), lease.token, os.getpid(), other.token, flush=True)
        time.sleep(600)


if __name__ == "__main__":
    main()

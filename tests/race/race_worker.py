"""One racing worker: take the lease, write through the fence, record the grant.

Run as a separate process by test_race.py. Times are CLOCK_MONOTONIC, which is
one clock for every process on a Linux host, so intervals from different
workers can be compared."""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import time
from pathlib import Path

from lease_integrations import LeaseBusy, LeaseLock, LeaseLost, SqlFence, StaleToken, connect


def fenced_write(ledger: sqlite3.Connection, token: int, pid: int) -> bool:
    """The protected write; False when the fence rejected the token."""
    ledger.execute("BEGIN IMMEDIATE")
    try:
        SqlFence().check(ledger, "ledger", token)
        ledger.execute("INSERT INTO ledger (token, pid) VALUES (?, ?)", (token, pid))
    except StaleToken:
        ledger.execute("ROLLBACK")
        return False
    except BaseException:
        ledger.execute("ROLLBACK")
        raise
    ledger.execute("COMMIT")
    return True


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--ledger", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--go", required=True)
    parser.add_argument("--grants", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=60)
    args = parser.parse_args()

    store = connect(args.url)
    lock = LeaseLock(store, args.key, ttl=5.0)
    ledger = sqlite3.connect(args.ledger, isolation_level=None, timeout=30)
    pid = os.getpid()
    deadline = time.monotonic() + 30
    while not Path(args.go).exists():  # start together
        if time.monotonic() > deadline:
            raise SystemExit("never told to go")
        time.sleep(0.005)

    stop_at = time.monotonic() + args.seconds
    previous_token: int | None = None
    with open(args.out, "w") as out:
        grants = 0
        while grants < args.grants and time.monotonic() < stop_at:
            try:
                lease = lock.acquire(wait=10)
            except LeaseBusy:
                out.write(json.dumps({"event": "busy"}) + "\n")
                continue
            start = time.monotonic_ns()
            try:
                stale = None
                if previous_token is not None and previous_token < lease.token:
                    # A late write from this worker's previous grant: the fence
                    # must refuse it whenever a newer token has written since.
                    stale = fenced_write(ledger, previous_token, pid)
                accepted = fenced_write(ledger, lease.token, pid)
                time.sleep(0.001)
                lease.check()
            except LeaseLost:
                out.write(json.dumps({"event": "lost", "token": lease.token}) + "\n")
                lock.release(lease)
                continue
            end = time.monotonic_ns()
            lock.release(lease)
            grants += 1
            out.write(json.dumps({"event": "grant", "token": lease.token, "start": start,
                                  "end": end, "pid": pid, "accepted": accepted,
                                  "stale_token": previous_token, "stale_accepted": stale}) + "\n")
            out.flush()
            previous_token = lease.token
            time.sleep(0.003)  # outside the lease: give the other workers a turn
    store.close()


if __name__ == "__main__":
    main()

"""A fault-injection worker process: take the lease, write through the fence,
log every step. Run by harness.py; see history.py for the event format.

``--policy check`` models a job that never calls ``lease.check()`` before
its writes (a paused process wakes up mid-write): then only the fence stands
between a stale holder and the resource, which is what these tests show.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from history import EventLog

from lease_integrations import (
    Lease,
    LeaseBusy,
    LeaseLock,
    LeaseLost,
    SqlFence,
    StaleToken,
    StoreUnavailable,
    connect,
)


def shift_wall_clock(offset: float) -> None:
    """Make this process's wall clock wrong: expiry must not care."""
    real_time, real_time_ns = time.time, time.time_ns
    time.time = lambda: real_time() + offset  # type: ignore[assignment]
    time.time_ns = lambda: real_time_ns() + int(offset * 1e9)  # type: ignore[assignment]


def fenced_write(ledger: sqlite3.Connection, token: int, worker: str, seconds: float = 0.0) -> bool:
    """One fenced write; ``seconds`` models a slow one (held inside the transaction)."""
    ledger.execute("BEGIN IMMEDIATE")
    try:
        SqlFence().check(ledger, "resource", token)
        ledger.execute("INSERT INTO writes (token, worker) VALUES (?, ?)", (token, worker))
        if seconds:
            time.sleep(seconds)
    except StaleToken:
        ledger.execute("ROLLBACK")
        return False
    except BaseException:
        ledger.execute("ROLLBACK")
        raise
    ledger.execute("COMMIT")
    return True


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--worker", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--ledger", required=True)
    p.add_argument("--ttl", type=float, default=2.0)
    p.add_argument("--hold", type=float, default=0.3)
    p.add_argument("--writes", type=int, default=3)
    p.add_argument("--write-seconds", type=float, default=0.0)
    p.add_argument("--policy", default="check")
    p.add_argument("--wait", type=float, default=30.0)
    p.add_argument("--grants", type=int, default=1)
    p.add_argument("--seconds", type=float, default=120.0)
    p.add_argument("--pause-between", type=float, default=0.0)
    p.add_argument("--clock-offset", type=float, default=0.0)
    args = p.parse_args()

    if args.clock_offset:
        shift_wall_clock(args.clock_offset)
    log = EventLog(args.log, worker=args.worker, pid=os.getpid())
    stop_at = time.monotonic() + args.seconds
    while True:  # a fault may hit while we connect: that is a store error, not a crash
        try:
            store = connect(args.url)
            break
        except StoreUnavailable as exc:
            log.write("store_error", error=str(exc))
            if time.monotonic() > stop_at:
                raise
            time.sleep(0.1)
    lock = LeaseLock(store, args.key, ttl=args.ttl, on_lost=args.policy)
    ledger = sqlite3.connect(args.ledger, isolation_level=None, timeout=30)
    log.write("started")
    grants = 0
    while grants < args.grants and time.monotonic() < stop_at:
        try:
            lease = lock.acquire(wait=args.wait)
            returned = time.monotonic_ns()  # first: a pause may land before the log line
        except LeaseBusy as busy:
            log.write("busy", holder=busy.holder, token=busy.token)
            time.sleep(0.05)
            continue
        except StoreUnavailable as exc:
            log.write("store_error", error=str(exc))
            time.sleep(0.1)
            continue
        grants += 1
        log.write("acquire", token=lease.token, holder=lease.holder, since=returned,
                  trusted_until=int(lease.trusted_until * 1e9))

        def report_loss(lost: Lease) -> None:
            log.write("lost", token=lost.token, reason=lost.lost_reason)

        lease.on_lost(report_loss)
        try:
            for _ in range(args.writes):
                ok = fenced_write(ledger, lease.token, args.worker, args.write_seconds)
                log.write("write", token=lease.token, ok=ok)
                time.sleep(args.hold / max(args.writes, 1))
        except LeaseLost:
            log.write("gave_up", token=lease.token)
            lock.release(lease)
            continue
        log.write("release", token=lease.token)
        try:
            lock.release(lease)
        except StoreUnavailable:
            log.write("store_error", error="release failed; the ttl is the backstop")
        if args.pause_between:
            time.sleep(args.pause_between)
    log.write("exit")
    store.close()


if __name__ == "__main__":
    main()

"""Time from a supersede call to the new grant (``lock.acquire(supersede=True)``
returning), against a holder in another process that holds the key under
``hold()`` (policy ``exit``): side by side with the graceful hand-over, where
the holder releases and a waiter takes the key.

Two kinds of holder: one on this host (the supersede sees its pid exit after
it recorded the loss: about one heartbeat, ttl/3, plus its ladder) and one
whose meta names another host (the supersede cannot see it: it waits out the
broken record's expiry, up to one ttl from its last renewal).

    python -m benchmarks.supersede_latency [--url URL] [--ttl 3 12] [--runs 3]

Prints one table; nothing is asserted.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from lease_integrations import LeaseLock, connect

HOLDER = """
import sys, time
from pathlib import Path
from lease_integrations import LeaseLock, connect
url, key, ttl, host, ready, stop = sys.argv[1:7]
meta = {"host": host} if host else {}
with LeaseLock(connect(url), key, ttl=float(ttl), meta=meta).hold() as lease:
    Path(ready).write_text(str(lease.token))
    while not Path(stop).exists():
        time.sleep(0.005)
"""


def start_holder(url: str, key: str, ttl: float, host: str, tmp: Path,
                 ) -> tuple[subprocess.Popen[bytes], Path]:
    ready, stop = tmp / f"{key}.ready", tmp / f"{key}.stop"
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, url, key, str(ttl), host,
                             str(ready), str(stop)])
    deadline = time.monotonic() + 60
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the holder did not take {key!r} (exit {proc.poll()})")
        time.sleep(0.01)
    return proc, stop


def supersede_once(url: str, ttl: float, host: str, tmp: Path) -> float:
    key = f"bench-supersede-{uuid.uuid4().hex[:8]}"
    proc, _ = start_holder(url, key, ttl, host, tmp)
    store = connect(url)
    try:
        time.sleep(ttl / 2)  # somewhere inside a heartbeat interval, as a real call lands
        lock = LeaseLock(store, key, ttl=ttl)
        began = time.monotonic()
        lease = lock.acquire(supersede=True)
        took = time.monotonic() - began
        lock.release(lease)
    finally:
        store.close()
        proc.wait(timeout=60)
    return took


def handover_once(url: str, ttl: float, tmp: Path) -> float:
    key = f"bench-handover-{uuid.uuid4().hex[:8]}"
    proc, stop = start_holder(url, key, ttl, "", tmp)
    store = connect(url)
    try:
        lock = LeaseLock(store, key, ttl=ttl)
        began = time.monotonic()
        stop.write_text("")  # the holder's block ends: it releases
        lease = lock.acquire(wait=None)
        took = time.monotonic() - began
        lock.release(lease)
    finally:
        store.close()
        proc.wait(timeout=60)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=None, help="store URL (default: a SQLite file in a "
                                                    "temporary directory)")
    parser.add_argument("--ttl", type=float, nargs="+", default=[3.0, 12.0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        url = args.url or f"sqlite://{tmp}/leases.db"
        print(f"Supersede to new grant, {args.runs} runs each, median (min-max) seconds; "
              f"store {url.split('://')[0]}")
        print(f"{'ttl':>6}  {'graceful hand-over':>20}  {'supersede, same host':>24}  "
              f"{'supersede, other host':>24}  {'same/ttl':>8}  {'other/ttl':>9}")
        for ttl in args.ttl:
            rows = [[handover_once(url, ttl, tmp) for _ in range(args.runs)],
                    [supersede_once(url, ttl, "", tmp) for _ in range(args.runs)],
                    [supersede_once(url, ttl, "another-host", tmp) for _ in range(args.runs)]]
            cells = [f"{statistics.median(r):.3f} ({min(r):.3f}-{max(r):.3f})" for r in rows]
            print(f"{ttl:>6g}  {cells[0]:>20}  {cells[1]:>24}  {cells[2]:>24}  "
                  f"{statistics.median(rows[1]) / ttl:>8.2f}  "
                  f"{statistics.median(rows[2]) / ttl:>9.2f}")


if __name__ == "__main__":
    main()

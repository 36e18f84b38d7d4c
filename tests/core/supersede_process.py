"""A holder or a superseding run for the supersede tests, as its own process:
``python supersede_process.py URL KEY DB OUT NAME [options]``.

It takes KEY (``--supersede``: replacing the holder, guarded by
``--only-newer FIELD`` with ``--meta`` JSON), writes OUT/NAME.ready (token,
pid, the ``time.monotonic_ns()`` of the grant and whether ``--old-pid`` still
ran at that moment), then writes fenced rows into the SQLite file DB (an
``SqlFence`` check and the row in one transaction: a committed row is a write
the fence accepted): ``--rows N`` of them then ends, or until it is stopped.
``--gil`` keeps the GIL in one long C call after its first rows (a job that
cannot run a bytecode when its lease is broken). A refused supersede writes
OUT/NAME.refused.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sqlite3
import time
from pathlib import Path

from lease_integrations import LeaseLock, SqlFence, StaleToken, connect
from lease_integrations.core.errors import LeaseBusy, SupersedeRefused
from lease_integrations.core.supersede_guards import only_newer
from lease_integrations.keeper.kernel import is_gone, process_state

FENCE = SqlFence()
RUN_AT_MOST = 120.0


def put(out: Path, name: str, text: str) -> None:
    tmp = out / f".{name}.{os.getpid()}.tmp"
    tmp.write_text(text)
    os.replace(tmp, out / name)


def running(pid: int) -> bool:
    return not is_gone(process_state(pid))


def write_row(db: sqlite3.Connection, token: int) -> bool:
    """One fenced write; False when the fence refused it."""
    db.execute("BEGIN IMMEDIATE")
    try:
        FENCE.check(db, "ledger", token)
        db.execute("INSERT INTO ledger_rows (token, pid, at_ns) VALUES (?, ?, ?)",
                   (token, os.getpid(), time.monotonic_ns()))
    except StaleToken:
        db.execute("ROLLBACK")
        return False
    db.execute("COMMIT")
    return True


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("url", "key", "db", "out", "name"):
        parser.add_argument(name)
    parser.add_argument("--supersede", action="store_true")
    parser.add_argument("--only-newer", default=None)
    parser.add_argument("--meta", default="{}")
    parser.add_argument("--old-pid", type=int, default=0)
    parser.add_argument("--rows", type=int, default=0)
    parser.add_argument("--gil", action="store_true")
    parser.add_argument("--ttl", type=float, default=3.0)
    args = parser.parse_args()
    out = Path(args.out)
    db = sqlite3.connect(args.db, isolation_level=None, timeout=30)
    db.execute("CREATE TABLE IF NOT EXISTS ledger_rows (token INTEGER, pid INTEGER, at_ns INTEGER)")
    FENCE.create_table(db)
    store = connect(args.url)
    lock = LeaseLock(store, args.key, ttl=args.ttl, meta=json.loads(args.meta))
    guard = only_newer(args.only_newer) if args.only_newer else None
    try:
        with lock.hold(supersede=args.supersede, supersede_if=guard) as lease:
            granted = time.monotonic_ns()
            old_ran = running(args.old_pid) if args.old_pid else False
            put(out, f"{args.name}.ready",
                f"{lease.token} {os.getpid()} {granted} {int(old_ran)}")
            deadline = time.monotonic() + RUN_AT_MOST
            written = 0
            while time.monotonic() < deadline and (not args.rows or written < args.rows):
                written += write_row(db, lease.token)
                if args.gil and written == 3:
                    ctypes.PyDLL(None).sleep(int(RUN_AT_MOST))  # keeps the GIL throughout
                time.sleep(0.005)  # the pace of the work, not a synchronisation
    except SupersedeRefused as refused:
        put(out, f"{args.name}.refused", str(refused))
    except LeaseBusy as busy:
        put(out, f"{args.name}.busy", str(busy))
    finally:
        store.close()


if __name__ == "__main__":
    main()

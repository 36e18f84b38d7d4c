"""Writing through the fencing guard.

A lease alone cannot stop a holder that froze (a long GC pause, a stopped
VM) past its TTL and woke up after another run took over: it still believes
it holds the lease. The fence makes the database itself refuse its write:
``SqlFence.check`` runs in the same transaction as the write and raises
``StaleToken`` when a newer token has already written, so the transaction
rolls back with it.

    python fenced_write.py /tmp/ledger.db
"""

from __future__ import annotations

import sqlite3
import sys

from prefect import task

from lease_integrations import SqlFence
from lease_integrations.prefect import current_lease, leased_flow

FENCE = SqlFence()


@task
def post_totals(db_path: str, total: int) -> int:
    token = current_lease().token
    conn = sqlite3.connect(db_path, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        FENCE.create_table(conn)
        conn.execute("CREATE TABLE IF NOT EXISTS ledger (token INTEGER, total INTEGER)")
        FENCE.check(conn, "ledger", token)  # raises StaleToken for an older holder
        conn.execute("INSERT INTO ledger VALUES (?, ?)", (token, total))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    finally:
        conn.close()
    return token


@leased_flow(key="ledger-writer", ttl=30, on_busy="fail")
def write_ledger(db_path: str, total: int = 42) -> int:
    return post_totals(db_path, total)


if __name__ == "__main__":
    print("written with token", write_ledger(sys.argv[1] if len(sys.argv) > 1 else "ledger.db"))

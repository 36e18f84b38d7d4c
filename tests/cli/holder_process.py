"""A live lease holder for the break test, run as its own process:
``python holder_process.py URL KEY OUT_DIR``.

It holds KEY under ``LeaseLock.hold()`` (policy ``exit``, the default) and
reports through files in OUT_DIR, each written atomically: ``ready`` (token
and holder), ``callback`` (the lease.lost callback fired, with the reason) or
``finished`` (the block ended: fail-stop never ended the process).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from lease_integrations import Lease, LeaseLock, LeaseLost, connect

HOLD_AT_MOST = 90.0


def put(out: Path, name: str, text: str) -> None:
    tmp = out / f".{name}.tmp"
    tmp.write_text(text)
    os.replace(tmp, out / name)


def main(url: str, key: str, out: Path) -> None:
    store = connect(url)
    lock = LeaseLock(store, key, ttl=3.0, meta={"dag_id": "billing", "run_id": "live"})

    def on_lost(lease: Lease) -> None:
        put(out, "callback", lease.lost_reason or "")

    try:
        with lock.hold() as lease:
            lease.on_lost(on_lost)
            put(out, "ready", f"{lease.token} {lease.holder}")
            deadline = time.monotonic() + HOLD_AT_MOST
            while time.monotonic() < deadline:
                time.sleep(0.05)  # the "work"; fail-stop ends the process here
        put(out, "finished", "the block ended")
    except LeaseLost as exc:
        put(out, "finished", f"the block ended with {exc}")
    finally:
        store.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], Path(sys.argv[3]))

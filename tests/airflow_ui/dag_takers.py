"""The lease holders of the per-DAG race tests (test_leases_per_dag_races.py),
run as processes beside the api-server, on the store it reads.

``python dag_takers.py shared URL KEY OUT STOP [SECONDS]``: takes KEY as DAG
``dag_a`` and releases it, and the moment it is free takes it as ``dag_b`` and
releases it, over and over, so the key's next token is always ``dag_b``'s;
each lease is held SECONDS (default ``HOLD``).

``python dag_takers.py fresh URL PREFIX OUT STOP``: takes the fresh keys
PREFIX-0, PREFIX-1, ... as ``dag_b``, each once, after writing the key it is
about to take to OUT.next (the attacker aims there); with ``history`` as
the first argument, ``dag_a`` takes each key first, so ``dag_b``'s grant is
the first of its DAG in that key's history.

Each grant is one JSON line in OUT: key, token, dag and whether its release
went through (False: someone broke it). Ends when STOP exists, or after
``DEADLINE`` seconds."""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path

from lease_integrations import LeaseStore, connect

TTL = 60.0  # nothing expires during a race: only a break ends a lease early
DEADLINE = 120.0
#: How long each lease is held: long enough for a read and a break over HTTP
#: to land inside it now and then.
HOLD = 0.02


def hold(store: LeaseStore, key: str, dag: str, out: Path, seconds: float = HOLD) -> None:
    holder, secret = f"{dag}-{os.getpid()}", os.urandom(8).hex()
    while True:
        result = store.acquire(key, holder, secret, TTL, {"dag_id": dag, "run_id": f"{dag}-run"})
        if result.granted and result.record is not None:
            break
        time.sleep(0.001)  # busy only while a breaker's request is in flight
    time.sleep(seconds)
    released = store.release(key, secret, result.record.token)
    with out.open("a") as f:
        f.write(json.dumps({"key": key, "token": result.record.token, "dag": dag,
                            "released": released}) + "\n")


def main(mode: str, url: str, key: str, out: Path, stop: Path, seconds: float = HOLD) -> None:
    deadline = time.monotonic() + DEADLINE
    with connect(url) as store:
        number = 0
        while not stop.exists() and time.monotonic() < deadline:
            if mode == "shared":
                hold(store, key, "dag_a", out, seconds)
                hold(store, key, "dag_b", out, seconds)
                continue
            fresh = f"{key}-{number}"
            number += 1
            out.with_suffix(".next").write_text(fresh)
            time.sleep(random.uniform(0.005, 0.03))  # the attacker is already aiming at it
            if mode == "history":
                hold(store, fresh, "dag_a", out)
            hold(store, fresh, "dag_b", out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4]), Path(sys.argv[5]),
         *(float(a) for a in sys.argv[6:7]))

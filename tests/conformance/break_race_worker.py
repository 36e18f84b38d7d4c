"""One side of the conditional-break race (test_store_protocol.py): a taker
that grants and releases the key over and over, or a breaker that reads the
key and breaks it on the token it read, the UI's and ``leasectl break
--token``'s check-then-break.

Run as a process (``python break_race_worker.py take|break ...``) for every
store that processes can share; the memory store lives in one process, so the
test calls ``take`` and ``breaker`` in threads there. Each writes one JSON
line per round to its ``out`` file. Coordination is by files beside it: a
breaker creates ``<out>.ready`` once connected (the takers start then) and
``<out>.done`` once it has both broken a lease and missed one; the takers go
on past their rounds until every breaker is done, so a store whose breaks
wait on a lock (SQLite's busy handler sleeps) still sees the race happen."""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from lease_integrations import connect

TTL = 30.0  # nothing expires during the race: only a break ends a lease early
DEADLINE = 120.0
#: Renewals between a grant and its release: without them the lease is held
#: for one round trip, and a breaker on a fast store rarely sees it held.
HOLD_RENEWALS = 2
#: Breaks and misses a breaker sees before it says it is done.
ENOUGH = 3


def ready(out: Path) -> Path:
    return out.with_suffix(".ready")


def done(out: Path) -> Path:
    return out.with_suffix(".done")


def _connect(url: str):  # type: ignore[no-untyped-def]
    """SQLite's busy handler is not fair: four processes in tight loops can
    starve one past the default 10 s on a loaded machine. Nothing here is about
    waiting, so give it a minute."""
    if url.startswith("sqlite:") and "timeout=" not in url:
        url += ("&" if "?" in url else "?") + "timeout=60"
    return connect(url)


def _name(role: str) -> str:
    return f"{role}-{os.getpid()}-{threading.get_ident()}"


def take(url: str, key: str, rounds: int, breakers: Sequence[Path], out: Path,
         work: float = 0.0) -> None:
    """At least ``rounds`` times, and until every breaker is done: take the
    key (retrying while busy), renew it, release it. A release refused means
    the lease was broken under us. ``work`` is how long each renewal's share
    of the job takes (seconds, by the clock): it lets a breaker that is much
    slower than the taker (one behind an HTTP server) still find leases held,
    and lets a SQLite breaker get the write lock; it orders nothing."""
    store = _connect(url)
    me = _name("taker")
    deadline = time.monotonic() + DEADLINE
    with open(out, "w") as lines:
        i = 0
        while i < rounds or not all(done(b).exists() for b in breakers):
            if time.monotonic() > deadline:
                break  # the test's assertions say what never happened
            secret = f"{me}-secret-{i}"
            result = store.acquire(key, f"{me}-{i}", secret, TTL, {})
            if not result.granted:
                continue
            assert result.record is not None
            token = result.record.token
            for _ in range(HOLD_RENEWALS):  # the job: keeps the lease held a little while
                if work:
                    time.sleep(work)
                if not store.renew(key, secret, token, TTL):
                    break
            released = store.release(key, secret, token)
            lines.write(json.dumps({"token": token, "released": released}) + "\n")
            i += 1
    store.close()


def breaker(url: str, key: str, stop: Path, out: Path) -> None:
    """Until ``stop`` exists: read the key and, when it is held, break it on
    the token just read. Records what it aimed at and what it broke."""
    store = _connect(url)
    by = _name("breaker")
    deadline = time.monotonic() + DEADLINE
    broke = missed = 0
    store.get(key)  # connected and warm
    ready(out).touch()
    with open(out, "w") as lines:
        while not stop.exists() and time.monotonic() < deadline:
            current = store.get(key)
            if current is None or current.holder is None:
                continue
            before = store.force_release(key, by, token=current.token)
            lines.write(json.dumps({
                "aimed": current.token, "by": by,
                "broke": None if before is None else before.token,
                "holder": None if before is None else before.holder}) + "\n")
            broke, missed = broke + (before is not None), missed + (before is None)
            if min(broke, missed) == ENOUGH:
                done(out).touch()
    store.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["take", "break"])
    parser.add_argument("--url", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--breaker", type=Path, action="append", default=[])
    parser.add_argument("--stop", type=Path)
    parser.add_argument("--work", type=float, default=0.0)
    args = parser.parse_args()
    if args.role == "take":
        take(args.url, args.key, args.rounds, args.breaker, args.out, args.work)
    else:
        breaker(args.url, args.key, args.stop, args.out)


if __name__ == "__main__":
    main()

"""What the job and its keeper say to each other, written and read here only:
JSON objects, one a line, and for what every hold sends, two short lines
without JSON (``a``: keep this lease; ``d``: drop it)."""

from __future__ import annotations

import json
from typing import Any

from ..core.lease import Lease


def encode(messages: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(m, separators=(",", ":")) + "\n" for m in messages).encode()


def add(lid: int, sid: int, lease: Lease, interval: float, armed: bool) -> bytes:
    """The ``add`` of one lease: one line (this runs on every acquire), or
    JSON for a holder name with a newline (never ours; an adopted record's)."""
    if "\n" in lease.holder:
        return encode([{"op": "add", "id": lid, "store": sid, "key": lease.key,
                        "holder": lease.holder, "token": lease.token, "secret": lease.secret,
                        "ttl": lease.ttl, "margin": lease.margin, "grace": lease.grace,
                        "interval": interval, "started": lease.attempt_started,
                        "trusted_until": lease.trusted_until, "armed": armed,
                        "adopted": lease.adopted}])
    return (f"a {lid} {sid} {lease.token} {lease.ttl!r} {lease.margin!r} {lease.grace!r} "
            f"{interval!r} {lease.attempt_started!r} {lease.trusted_until!r} {int(armed)} "
            f"{int(lease.adopted)} {lease.key} {lease.secret} {lease.holder}\n").encode()


def drop(lid: int) -> bytes:
    return b"d %d\n" % lid


def parse_add(line: bytes) -> dict[str, Any]:
    """An ``a`` line, as the JSON ``add`` would say it."""
    (_, lid, sid, token, ttl, margin, grace, interval, started, trusted, armed, adopted, key,
     secret, holder) = line.decode().split(" ", 14)
    return {"id": int(lid), "store": int(sid), "token": int(token), "ttl": float(ttl),
            "margin": float(margin), "grace": float(grace), "interval": float(interval),
            "started": float(started), "trusted_until": float(trusted), "armed": armed == "1",
            "adopted": adopted == "1",
            "key": key, "secret": secret, "holder": holder}

"""``break``: the operator's force-release, the only path in the library that
touches another holder's lease. It asks for ``--yes`` because breaking a live
holder means two runs may overlap until the holder's heartbeat notices.

``--token N`` breaks only the lease the operator looked at: the store checks
the token and breaks in one atomic step (``force_release(..., token=N)``), so
a run that took the key since is never broken by a command aimed at the one
before it."""

from __future__ import annotations

import argparse
import getpass
import os
import socket

from ..core.errors import ConfigurationError
from ..core.record import LeaseRecord
from ..core.store import LeaseStore
from . import exits
from .render import emit, emit_json, escape, expires_phrase, meta_summary, record_json


def default_breaker() -> str:
    """``user@host``: who to ask later why the lease was broken."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (some containers)
        user = os.environ.get("USER") or "unknown"
    return f"{user}@{socket.gethostname()}"


def run_break(store: LeaseStore, args: argparse.Namespace) -> int:
    by = default_breaker() if args.by is None else args.by.strip()
    if not by:
        raise ConfigurationError(f"--by must name who breaks the lease, got {args.by!r}")
    if escape(by) != by:
        # It is stored in the history and printed to every later reader.
        raise ConfigurationError(
            f"--by {escape(by)!r} contains control characters; name the breaker in plain text")
    token: int | None = args.token
    current = store.get(args.key)
    if current is None:
        raise exits.not_found(f"no lease {args.key!r} in {store.url}")
    if token is not None and current.holder is not None and current.token != token:
        raise _changed_hands(args.key, current, token)
    if current.holder is None:
        if args.json:
            emit_json({"key": args.key, "broken": False, "by": by,
                       "before": record_json(current)})
        else:
            emit(f"lease {args.key!r} is not held (token {current.token} was released); "
                 "nothing to break")
        return exits.OK
    about = meta_summary(current.meta)
    holder = f"{current.holder}" + (f" ({about})" if about else "")
    if not args.yes:
        raise exits.refused(
            f"refusing to break lease {args.key!r} without --yes: it is {current.state}, "
            f"token {current.token}, holder {holder}, {expires_phrase(current)}."
            + (" Breaking a live holder lets another run start before the holder notices."
               if current.state == "held" else "")
        )
    before = store.force_release(args.key, by, token=token)
    if before is None and token is not None:  # the lease changed since our read: say how
        now = store.get(args.key)
        if now is not None and now.holder is not None:
            raise _changed_hands(args.key, now, token)
        if args.json:
            emit_json({"key": args.key, "broken": False, "by": by,
                       "before": None if now is None else record_json(now)})
        else:
            emit(f"lease {args.key!r} token {token} was released meanwhile; nothing to break")
        return exits.OK
    if before is None:  # deleted between our read and the break
        raise exits.not_found(f"no lease {args.key!r} in {store.url}")
    if args.json:
        emit_json({"key": args.key, "broken": before.holder is not None, "by": by,
                   "before": record_json(before)})
        return exits.OK
    if before.holder is None:
        emit(f"lease {args.key!r} was released meanwhile (token {before.token}); nothing broken")
    else:
        emit(f"broke lease {args.key!r}: token {before.token} of {before.holder} was "
              f"{before.state}; recorded as broken by {by}.")
        emit("The holder's next renewal is refused and it reports the loss (lease.lost).")
    return exits.OK


def _changed_hands(key: str, now: LeaseRecord, token: int) -> exits.CommandFailed:
    return exits.refused(
        f"lease {key!r} changed hands: token {now.token} of {now.holder} holds it now, not "
        f"--token {token}; nothing broken. Look again (leasectl show) before breaking it.")

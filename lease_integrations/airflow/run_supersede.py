"""``on_busy="supersede"`` for the DAG-run lease: the acquire task replaces
the run that holds the key, through the core's one supersede
(``keeper/supersede``: conditional break of the holder's token, recorded as
superseded with this run's identity, a wait until the old holder is gone or
its trust window has closed, a higher token).

The run's lease is not an ordinary ``LeaseLock`` holder: its owner secret is
derived (``run_lease.run_secret``) so every task of the run can adopt it,
and its holder is the run (``dagrun:<dag_id>:<run_id>``). ``_RunTaker``
gives the supersede what it asks of a lock with that identity; while it
waits for the old run to be gone the new lease is renewed (adopted), then
left to the keeper task as a plain acquire leaves it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from lease_integrations import Lease, LeaseBusy, LeaseLock, LeaseStore
from lease_integrations.core.supersede_guards import SupersedeGuard
from lease_integrations.keeper.supersede import supersede_acquire

from .run_lease import acquire_for_run

#: How often a waiting acquire asks again when the store does not notify.
POLL = 0.5


class _RunTaker:
    """What ``supersede_acquire`` needs of a lock, for the run's identity."""

    def __init__(self, lock: LeaseLock, holder: str, secret: str,
                 meta: Mapping[str, Any]) -> None:
        self.lock = lock
        self.store: LeaseStore = lock.store
        self.key = lock.key
        self.ttl = lock.ttl
        self.holder = holder
        self.secret = secret
        self.meta = dict(meta)

    def _identity(self, meta: Mapping[str, Any] | None) -> tuple[str, dict[str, Any]]:
        return self.holder, {**self.meta, **(meta or {})}

    def _acquire(self, wait: float | None, meta: Mapping[str, Any] | None, *,
                 armed: bool) -> Lease:
        deadline = None if wait is None else time.monotonic() + wait
        _, full = self._identity(meta)
        while True:
            result = acquire_for_run(self.store, self.key, self.holder, self.secret, self.ttl,
                                     full)
            if result.granted and result.record is not None:
                # Renewed from here on (the old holder may take a ttl to be gone).
                return self.lock.adopt(result.record.token, self.secret)
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise LeaseBusy(self.key, result.record)
            self.store.wait_for_release(self.key, POLL if left is None else min(POLL, left))

    def release(self, lease: Lease) -> bool:
        return self.lock.release(lease)


def supersede_run(lock: LeaseLock, holder: str, secret: str, meta: Mapping[str, Any],
                  guard: SupersedeGuard | None) -> int:
    """Take ``lock``'s key for the run (``holder``, ``secret``), replacing the
    run that holds it if ``guard`` allows; the new token. Raises
    ``SupersedeRefused`` when the guard says no, ``LeaseBusy`` when another
    run won the key first. The lease is left in the store, renewed by no one
    here: the run's keeper adopts it next, as after a plain acquire."""
    lease = supersede_acquire(_RunTaker(lock, holder, secret, meta), 0, None, guard,
                              armed=False)
    if lease.kept_by is not None:
        lease.kept_by.remove(lease)  # stop renewing; never release: the run holds it
    return lease.token

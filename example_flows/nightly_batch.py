"""A nightly batch that must never run twice at once.

The schedule fires at 02:00; someone also presses "Run" in the UI at 02:05
while the 02:00 run is still going, or a redeploy starts a second runner.
Prefect's own limits cover none of those together; the lease does: the
second run ends Cancelled, its state message naming the run that holds the
lease (host, pid, flow run id), and the first run is untouched.

    LEASE_STORE_URL=postgresql://leases@db/jobs python nightly_batch.py

Without ``LEASE_STORE_URL`` the lease lives in a SQLite file in the user's
state directory: enough for one machine, not for workers on several.

``serve()`` runs until you stop it (Ctrl-C) and schedules runs through a
Prefect server: start one first (``prefect server start``, and
``prefect config set PREFECT_API_URL=http://127.0.0.1:4200/api`` in this
shell). Against the ephemeral API Prefect starts when no server is
configured, nothing is ever scheduled. To run the flow once instead, call
``nightly_billing()``.
"""

from __future__ import annotations

import time

from prefect import task

from lease_integrations.prefect import current_lease, leased_flow


@task
def extract(day: str) -> list[int]:
    return [1, 2, 3]


@task
def load(rows: list[int]) -> int:
    # A long step checks its lease between chunks (on_lost="interrupt", the
    # default, also stops the flow by itself when the lease is lost).
    for _ in rows:
        current_lease().check()
        time.sleep(0.01)
    return len(rows)


@leased_flow(key="nightly-billing", ttl=120, on_busy="skip", retries=1, log_prints=True)
def nightly_billing(day: str = "today") -> int:
    """Bill yesterday's usage; one run at a time, whoever started it."""
    loaded = load(extract(day))
    print(f"loaded {loaded} rows under lease token {current_lease().token}")
    return loaded


if __name__ == "__main__":
    nightly_billing.serve(name="nightly", cron="0 2 * * *")

"""Run by test_prefect_smoke in its own process: one run of a leased flow,
reporting to the test's Prefect server (``$PREFECT_API_URL``) and sharing the
test's lease store (``$LEASE_STORE_URL``). The body records that it entered
(``$LEASE_SMOKE_DIR/entered-<pid>``, holding its token) and stays inside until
the test creates ``$LEASE_SMOKE_DIR/release``, so two runs really overlap.
Prints one ``RESULT`` line with the run's final state."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from lease_integrations.prefect import current_lease, leased_flow

BOUND = 180.0  # how long a body waits for the test's release (never reached when all is well)


@leased_flow(key="lease-smoke", ttl=30, on_busy="skip")
def lease_smoke() -> int:
    coord = Path(os.environ["LEASE_SMOKE_DIR"])
    token = current_lease().token
    (coord / f"entered-{os.getpid()}").write_text(str(token))
    deadline = time.monotonic() + BOUND
    while not (coord / "release").exists():
        if time.monotonic() > deadline:
            raise TimeoutError("the test never released the body")
        time.sleep(0.05)
    return token


if __name__ == "__main__":
    state = lease_smoke(return_state=True)
    print("RESULT " + json.dumps({"type": state.type.value, "message": state.message}), flush=True)

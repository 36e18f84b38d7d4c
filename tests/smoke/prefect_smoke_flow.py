"""Run by test_prefect_smoke in its own process: one run of a leased flow,
reporting to the test's Prefect server (``$PREFECT_API_URL``) and sharing the
test's lease store (``$LEASE_STORE_URL``). The body records that it entered
(``$LEASE_SMOKE_DIR/entered-<pid>``, holding its token) and stays inside until
the test creates ``$LEASE_SMOKE_DIR/release``, so two runs really overlap.
Prints one ``RESULT`` line with the run's final state.

With the argument ``lost`` it runs ``lease_smoke_lost`` instead: its body
records its flow run id (``$LEASE_SMOKE_DIR/lost-run``) and waits for the
test to break its lease; the default ``on_lost="exit"`` then reports the run
Crashed and ends the process (status 75) before the body can return."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from prefect.runtime import flow_run

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


@leased_flow(key="lease-smoke-lost", ttl=6, on_busy="fail")
def lease_smoke_lost() -> int:
    coord = Path(os.environ["LEASE_SMOKE_DIR"])
    (coord / "lost-run").write_text(json.dumps({"id": str(flow_run.id), "token": current_lease().token}))
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:  # fail-stop ends the process long before
        time.sleep(0.05)
    return 0


if __name__ == "__main__":
    flow = lease_smoke_lost if sys.argv[1:] == ["lost"] else lease_smoke
    state = flow(return_state=True)
    print("RESULT " + json.dumps({"type": state.type.value, "message": state.message}), flush=True)

"""Child process: serve flows_for_tests.deployed as the deployment
``deployed/leased``. Prefect's runner then starts each run in a fresh process
and calls the flow function through its engine, never ``Flow.__call__``."""

from __future__ import annotations

import flows_for_tests

if __name__ == "__main__":
    flows_for_tests.deployed.serve(name="leased", print_starting_message=False)

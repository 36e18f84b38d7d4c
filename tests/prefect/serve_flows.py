"""Child process: serve flows_for_tests.deployed as the deployment
``deployed/leased`` (and ``cancellable/cancel``, ``fan-out/loss``,
``fenced-writer/supersede``). Prefect's
runner then starts each run in a fresh process and calls the flow function
through its engine, never ``Flow.__call__``."""

from __future__ import annotations

import flows_for_tests
from prefect import serve

if __name__ == "__main__":
    serve(flows_for_tests.deployed.to_deployment(name="leased"),
          flows_for_tests.cancellable.to_deployment(name="cancel"),
          flows_for_tests.fan_out.to_deployment(name="loss"),
          flows_for_tests.fenced_writer.to_deployment(name="supersede"),
          print_starting_message=False)

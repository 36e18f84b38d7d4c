"""Child process: run one flow of flows_for_tests and write its final state.

    python run_flow.py <flow attribute> <parameters as JSON> <output file>

The child reports to the test's Prefect server through ``$PREFECT_API_URL``
and finds the lease store through ``$LEASE_STORE_URL``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import flows_for_tests


def main() -> None:
    name, params, out = sys.argv[1], json.loads(sys.argv[2]), Path(sys.argv[3])
    flow = getattr(flows_for_tests, name)
    if flow.isasync:
        state = asyncio.run(flow(**params, return_state=True))
    else:
        state = flow(**params, return_state=True)
    record = {
        "type": state.type.value,
        "name": state.name,
        "message": state.message,
        "flow_run_id": str(state.state_details.flow_run_id),
    }
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(record))
    tmp.rename(out)


if __name__ == "__main__":
    main()

"""What the keeper process costs a job: the first hold's time, made at once
after the lock (it waits for the keeper to have the store open: one renewer
per lease), how long after that hold began the keeper was ready, its memory
(RSS), beside a process with the keeper off (``LEASE_KEEPER=off``), each in
a fresh process, side by side.

    .venv/bin/python -m benchmarks.keeper_costs URL [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import textwrap
from typing import Any

PROBE = textwrap.dedent("""
    import json, sys, time
    from lease_integrations import LeaseLock, connect
    from lease_integrations.core.clock import now
    from lease_integrations.keeper.client import get_keeper, keeps
    store = connect(sys.argv[1])
    lock = LeaseLock(store, sys.argv[2], ttl=30, on_lost="check")
    t0 = now()
    with lock.hold():
        held = now() - t0
    out = {"first_hold_ms": held * 1e3}
    if keeps(store):
        keeper = get_keeper()
        while not keeper._ready:  # the keeper says 'ready' once its store is open
            keeper.sync()
            time.sleep(0.001)
        out["keeper_ready_ms"] = (now() - t0) * 1e3
        with open(f"/proc/{keeper.pid}/status") as f:
            rss = next(line for line in f if line.startswith("VmRSS:"))
        out["keeper_rss_mib"] = int(rss.split()[1]) / 1024
    print(json.dumps(out))
""")


def _probe(url: str, key: str, keeper: bool) -> dict[str, float]:
    env = dict(os.environ)
    if not keeper:
        env["LEASE_KEEPER"] = "off"
    out = subprocess.run([sys.executable, "-c", PROBE, url, key], capture_output=True,
                         text=True, env=env, timeout=60, check=True).stdout
    result: dict[str, float] = json.loads(out.splitlines()[-1])
    return result


def run(url: str, runs: int, log: Any) -> dict[str, Any]:
    samples: dict[str, list[float]] = {}
    for i in range(runs):  # interleaved: a slow moment of the machine hits both
        for keeper in (True, False):
            for name, value in _probe(url, f"bench-keeper-cost-{i}", keeper).items():
                samples.setdefault(f"{name}{'' if keeper else '_no_keeper'}", []).append(value)
    med = {name: round(statistics.median(values), 2) for name, values in samples.items()}
    log(f"keeper costs on {url.split(':')[0]}: {med}")
    return {"url_scheme": url.split(":")[0], "runs": runs, **med}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("--runs", type=int, default=5)
    args = p.parse_args()
    print(json.dumps(run(args.url, args.runs, lambda m: print(m, file=sys.stderr)), indent=2))


if __name__ == "__main__":
    main()

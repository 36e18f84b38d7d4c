"""A fenced export to S3: the flow's output is published for its lease's
token, all or nothing.

A run frozen past its TTL (a long GC pause, a stopped VM) that wakes up after
another run took over still believes it holds the lease. ``ObjectFence``
makes the bucket refuse its output: ``commit`` raises ``StaleToken`` when a
newer token has committed, and the newer output stays whole. Readers follow
the manifest (``ObjectFence(url).read()``), never a half-written set of files.

    pip install -e '<checkout>[prefect,s3]'
    python fenced_export.py s3://your-bucket/exports/billing
"""

from __future__ import annotations

import sys

from lease_integrations.core.fencing import ObjectFence
from lease_integrations.prefect import current_lease, leased_flow


@leased_flow(key="exports/billing", ttl=60, on_busy="fail")
def export_billing(url: str) -> int:
    token = current_lease().token
    rows = b"customer,amount\nacme,120\nglobex,80\n"
    ObjectFence(url).commit(token, {"billing.csv": rows, "_SUCCESS": f"token {token}\n".encode()})
    return token


if __name__ == "__main__":
    print("exported with token", export_billing(sys.argv[1]))

"""Make the holder visible in the Prefect UI: the flow run gets a tag
``lease:<key>`` (filterable in the runs list) and a markdown artifact with the
key, token and holder (the artifact key ``lease-<key>`` groups every holder
of one lease in the Artifacts page: a history of who ran).

Best effort: the lease is already held when this runs, so a failing API call
is logged and the run goes on; the protection does not depend on the UI.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from lease_integrations import Lease

log = logging.getLogger("lease_integrations")

TAG_PREFIX = "lease:"


def tag_for(key: str) -> str:
    return f"{TAG_PREFIX}{key}"


def artifact_key_for(key: str) -> str:
    """Artifact keys allow only lowercase letters, digits and dashes."""
    slug = re.sub(r"[^a-z0-9]+", "-", key.lower()).strip("-")
    return f"lease-{slug}"[:100]


def _markdown(lease: Lease) -> str:
    rows = [("key", lease.key), ("token", str(lease.token)), ("holder", lease.holder)]
    for name in ("flow_run_id", "deployment_id", "host", "pid"):
        if lease.meta.get(name) not in (None, ""):
            rows.append((name, str(lease.meta[name])))
    if lease.expires_at is not None:
        rows.append(("first expiry (renewed by heartbeat)", lease.expires_at.isoformat()))
    body = "\n".join(f"| {name} | `{value}` |" for name, value in rows)
    return f"### Lease `{lease.key}` held, token {lease.token}\n\n| | |\n|---|---|\n{body}\n"


def annotate_sync(ctx: Any, lease: Lease) -> None:
    from prefect.artifacts import create_markdown_artifact

    try:
        run = ctx.flow_run
        tags = sorted({*(run.tags or []), tag_for(lease.key)})
        ctx.client.update_flow_run(run.id, tags=tags)
        create_markdown_artifact(
            markdown=_markdown(lease), key=artifact_key_for(lease.key),
            description=f"lease {lease.key} token {lease.token}", _sync=True,
        )
    except Exception as exc:  # best effort: the run goes on unannotated
        log.warning("could not annotate flow run with lease %s: %s", lease.key, exc)


async def annotate_async(ctx: Any, lease: Lease) -> None:
    from prefect.artifacts import acreate_markdown_artifact

    try:
        run = ctx.flow_run
        tags = sorted({*(run.tags or []), tag_for(lease.key)})
        await ctx.client.update_flow_run(run.id, tags=tags)
        await acreate_markdown_artifact(
            markdown=_markdown(lease), key=artifact_key_for(lease.key),
            description=f"lease {lease.key} token {lease.token}",
        )
    except Exception as exc:  # best effort; a cancel (on_lost='cancel') passes
        log.warning("could not annotate flow run with lease %s: %s", lease.key, exc)

"""A test-only Airflow secrets backend that lets one api-server show a
different lease store on every request, so a test need not start a server
per store URL.

The Leases page resolves its store per request (``store_source.locate``):
the ``lease_default`` Connection through Airflow's secrets backends, which
ask this backend first, else ``$LEASE_STORE_URL``. This backend reads its
JSON file (``backend_kwargs: {"path": ...}``) on every lookup:

- ``{"connection": {"conn_type": ..., "host": ..., "password": ...}}``: the
  Connection it serves (Airflow's JSON Connection form);
- ``{"url": "redis+sentinel://..."}``: no Connection, and the URL becomes the
  process's ``$LEASE_STORE_URL``, which the page reads right after this
  lookup in the same thread. The only way in for the multi-host schemes and
  the malformed URLs, which no Connection describes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from airflow.sdk.bases.secrets_backend import BaseSecretsBackend

CONN_ID = "lease_default"


class SwitchableStoreBackend(BaseSecretsBackend):  # type: ignore[misc]  # untyped without Airflow
    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = Path(path)

    def get_conn_value(self, conn_id: str, team_name: str | None = None) -> str | None:
        if conn_id != CONN_ID:
            return None
        case = json.loads(self.path.read_text())
        if "url" in case:
            os.environ["LEASE_STORE_URL"] = case["url"]
            return None
        os.environ.pop("LEASE_STORE_URL", None)
        return json.dumps(case["connection"])

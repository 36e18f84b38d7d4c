"""Refuse the embedded per-host store where Airflow runs tasks on many hosts.

The embedded default is a SQLite file under ``$AIRFLOW_HOME``: every task on
one host shares it, so it excludes runs on that host only. Under the
LocalExecutor every try runs on the scheduler's host and that is enough; under
Celery, Kubernetes, Edge or any other executor (or a hybrid ``"A,B"``) two
tries of one key can start on two hosts, each with its own file, and both
would "hold" the lease. A user who chose no store there gets a task that fails
before any work with the exact ways to choose one, never a silent no-op lock.
"""

from __future__ import annotations

import os

from lease_integrations import ConfigurationError
from lease_integrations.core.config import ENV_URL

#: Executors that run every task on the scheduler's own host.
LOCAL_EXECUTORS = frozenset({"LocalExecutor", "SequentialExecutor", "DebugExecutor"})


def configured_executors() -> list[str]:
    """The executor names in ``[core] executor`` (every team's, for multi-team
    configurations ``"A,B;team=C"``), as written: class names, module paths or
    ``alias:module.Class``."""
    from ._compat import airflow_conf

    conf = airflow_conf()
    raw = str(conf.get("core", "executor", fallback="LocalExecutor") or "LocalExecutor")
    names: list[str] = []
    for team_part in raw.split(";"):
        executors = team_part.split("=", 1)[1] if "=" in team_part else team_part
        names.extend(name.strip() for name in executors.split(",") if name.strip())
    return names or ["LocalExecutor"]


def remote_executors(names: list[str]) -> list[str]:
    """The names among ``names`` whose tasks may run on another host."""
    def class_name(name: str) -> str:
        return name.rsplit(":", 1)[-1].rsplit(".", 1)[-1]

    return [name for name in names if class_name(name) not in LOCAL_EXECUTORS]


def refuse_per_host_default(conn_id: str) -> None:
    """Called when no Connection names the store: allowed if ``$LEASE_STORE_URL``
    chooses one (an explicit SQLite URL included: the user knows where it is),
    or if every configured executor is local."""
    if os.environ.get(ENV_URL, "").strip():
        return
    remote = remote_executors(configured_executors())
    if not remote:
        return
    raise ConfigurationError(
        f"no lease store is configured (no Airflow connection {conn_id!r}, no ${ENV_URL}), "
        f"and the executor {', '.join(remote)} can run tries of one key on different hosts: "
        "the embedded per-host SQLite default would give no exclusion there. Choose a store "
        f"that every worker and the triggerer reach: define the Airflow connection {conn_id!r} "
        "(type redis, postgres or mongo; e.g. "
        f"AIRFLOW_CONN_{conn_id.upper()}='redis://lease-redis:6379/0'), or set "
        f"{ENV_URL}=redis://lease-redis:6379/0 in the workers' and triggerer's environment, "
        "or pass lease_conn_id=<connection id> to the task. A SQLite file is accepted when "
        f"named explicitly ({ENV_URL}=sqlite:////shared/path/leases.db)."
    )

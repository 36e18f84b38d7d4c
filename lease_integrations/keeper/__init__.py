"""The lease's lifetime: renewing, judging and stopping.

The job hands each lease to what keeps it: a keeper process (``process``,
started and spoken to by ``client``) or, where none can be used, this
process's heartbeat (``heartbeat``). A loss under a fail-stop block runs the
job's ladder (``failstop``); the kernel's tools (``kernel``) and the walk of
the job's tree (``descendants``) end what the job started, with or without
a live keeper. ``isolated`` runs work that must end on loss in a child.

``stop_hook`` is how a face (Airflow, Prefect) adds its step to the ladder,
and ``exit_status`` how such a step that reported the outcome itself picks
the status the ladder exits with.
"""

import os

from . import client, failstop, heartbeat
from .failstop import exit_status, stop_hook


def _after_fork() -> None:
    """The one fork hook: a forked child holds none of its parent's leases."""
    heartbeat.after_fork()
    client.after_fork()
    failstop.after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)

__all__ = ["exit_status", "stop_hook"]

"""The lease's lifetime: renewing, judging and stopping.

The job hands each lease to what keeps it: a keeper process (``process``,
started and spoken to by ``client``) or, where none can be used, this
process's heartbeat (``heartbeat``). A loss under a fail-stop block runs the
job's ladder (``failstop``); the kernel's tools (``kernel``) and the walk of
the job's tree (``descendants``) end what the job started, with or without
a live keeper. ``isolated`` runs work that must end on loss in a child.

``stop_hook`` is how a face (Airflow, Prefect) adds its step to the ladder.
"""

from .failstop import stop_hook

__all__ = ["stop_hook"]

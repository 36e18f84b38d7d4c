"""The Airflow face's fail-stop hook: ``task.on_kill()``, as Airflow's own
timeout and supervisor call it, without letting the task process end before
the core's ladder has ended the job.

Airflow's task process ends as soon as ``execute`` has returned and the
outcome is reported: ``os._exit`` right after the atexit functions registered
in the task process. ``on_kill()`` often ends what ``execute`` waits for (a
``BashOperator`` SIGTERMs its command's process group), so ``execute`` returns
while the ladder still has steps to run: a task process that exited there
would leave every process outside that group (a daemon the command started
with ``setsid``, a child in a session of its own) running, and would exit 0
instead of ``LEASE_LOST_EXIT_STATUS``. So the hook first registers an atexit
function that waits for the ladder (it ends the process within its budget,
well inside the lease's margin), then calls ``on_kill()``.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable
from typing import Any

from lease_integrations import Lease


def task_stop_hook(task: Any, lease: Lease) -> Callable[[], None]:
    """A ``stop_hook`` for ``task`` holding ``lease``: hold the process's exit
    for the ladder, then ``task.on_kill()``."""

    def stop() -> None:
        atexit.register(_await_ladder, lease.margin)
        task.on_kill()

    return stop


def _await_ladder(margin: float) -> None:
    """At exit: give the ladder (already running: this was registered by its
    own stop hook) the time it may take; it ends the process meanwhile."""
    threading.Event().wait(margin)

"""Release the lease on SIGTERM, before Airflow's supervisor escalates.

When a task is marked failed or cleared from the UI, or its worker shuts
down, the supervisor sends SIGTERM and SIGKILL 5 s later. Airflow's own
handler only calls ``on_kill()`` and lets the callable run on, so a lease
would be held until SIGKILL and then for a whole TTL. This handler gives the
lease back first (one store round trip), then chains to the handler that was
there (Airflow's, which calls ``on_kill``), then stops the callable.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

log = logging.getLogger("lease_integrations")


@contextmanager
def release_on_sigterm(release: Callable[[], object], describe: str) -> Iterator[None]:
    """While the block runs, SIGTERM calls ``release()``, then the previous
    handler, then raises ``AirflowTaskTerminated`` in the block so the try
    ends failed (not success, since the work was cut short)."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread can own signal handlers; on_kill still releases
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous is None:  # installed outside Python: the best we can restore is the default
        previous = signal.SIG_DFL
    if previous == signal.SIG_IGN:
        yield
        return

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        from ._compat import AirflowTaskTerminated

        log.warning("SIGTERM: releasing %s before the supervisor escalates", describe)
        try:
            release()
        except Exception:  # the ttl is the backstop; Airflow's handler must still run
            log.exception("could not release %s on SIGTERM; it expires after its ttl", describe)
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
        raise AirflowTaskTerminated(f"task received SIGTERM; {describe} released")

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)

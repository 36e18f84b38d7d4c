"""One step of a stop, given a deadline: a hung callback or store must not
keep a process alive past its lease, so the step runs on a thread of its
own and is left behind when its time is up. Its own file because the
ladder, the keeper and the renewer (explaining a refusal) all bound their
store calls this way, and none of them may import another for it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ..core.clock import now

log = logging.getLogger("lease_integrations")


def bounded(step: Callable[[], object], deadline: float, what: str) -> None:
    """Run ``step`` on its own thread and wait for it until ``deadline``: a
    hung callback or store must not keep the process alive past its lease."""
    remaining = deadline - now()
    if remaining <= 0:
        log.error("fail-stop: no time left for %s; skipped", what)
        return

    def run() -> None:
        try:
            step()
        except BaseException:
            log.exception("fail-stop: %s raised", what)

    thread = threading.Thread(target=run, name="lease-fail-stop", daemon=True)
    try:
        thread.start()
    except RuntimeError:  # Python 3.12 refuses new threads once the interpreter is ending
        log.error("fail-stop: no thread for %s (the interpreter is ending); skipped", what)
        return
    thread.join(remaining)
    if thread.is_alive():
        log.error("fail-stop: %s did not finish in time; going on", what)

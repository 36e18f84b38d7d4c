"""One step of a stop, given a deadline: a hung callback or store must not
keep a process alive past its lease, so the step runs on a thread of its
own and is left behind when its time is up. Its own file because the
ladder, the keeper and the renewer (explaining a refusal) all bound their
store calls this way, and none of them may import another for it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from contextlib import suppress

from ..core.clock import now

log = logging.getLogger("lease_integrations")


def bounded(step: Callable[[], object], deadline: float, what: str) -> None:
    """Run ``step`` on its own thread and wait for it until ``deadline``: a
    hung callback or store must not keep the process alive past its lease."""
    remaining = deadline - now()
    if remaining <= 0:
        _complain("fail-stop: no time left for %s; skipped", what)
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
        return  # and with no thread, no complaint either (see _complain)
    thread.join(remaining)
    if thread.is_alive():
        _complain("fail-stop: %s did not finish in time; going on", what)


def _complain(text: str, what: str) -> None:
    """Say that a step was cut short, on a thread of its own: the step that
    overran may be a logging handler that never returns, and a log call made
    here would wait on that same handler's lock, and with it the stop."""
    with suppress(RuntimeError):
        threading.Thread(target=log.error, args=(text, what), name="lease-fail-stop-log",
                         daemon=True).start()

"""A skipped run is a normal outcome: one INFO line, no ERROR, no traceback.

The flow returns a ``Cancelled`` state naming the holder. A worker runs the
flow through ``python -m prefect.engine``, which asks the engine for the
run's *result*; for a Cancelled run that raises ``CancelledRun``, and Prefect
logs it at ERROR with a traceback ("Engine execution exited with unexpected
exception") before exiting, which log alerting would page on for a routine
skip. This filter drops exactly those records: ERROR records whose exception
is a ``CancelledRun`` carrying our skip message. Every other error, including
any other cancellation, is logged as Prefect logs it.
"""

from __future__ import annotations

import logging
import threading

#: Starts the message of a skipped run's Cancelled state (and its CancelledRun).
SKIP_PREFIX = "Skipped: "

#: Prefect's loggers that report an exception escaping the engine.
ENGINE_LOGGERS = ("prefect.flow_runs", "prefect.engine", "prefect.flow_engine")

_installed = False
_install_lock = threading.Lock()


class DropSkipTracebacks(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR or not record.exc_info:
            return True
        from prefect.exceptions import CancelledRun

        exc = record.exc_info[1]
        return not (isinstance(exc, CancelledRun) and str(exc).startswith(SKIP_PREFIX))


def quiet_skips() -> None:
    """Install the filter (once per process) on Prefect's engine loggers; called
    when a run skips, after Prefect has configured its logging."""
    global _installed
    with _install_lock:
        if _installed:
            return
        drop = DropSkipTracebacks()
        for name in ENGINE_LOGGERS:
            logging.getLogger(name).addFilter(drop)
        _installed = True

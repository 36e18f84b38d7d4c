"""The one clock every trust window is measured on.

``time.monotonic()`` stops while the machine is suspended, so a holder
resumed from a suspended laptop or VM would still believe it sits inside a
window the store closed long ago. ``CLOCK_BOOTTIME`` keeps counting through
a suspend, and, like ``CLOCK_MONOTONIC``, it is one clock for every process
of the host: the keeper process and the job it keeps compare its readings
directly. Where it is missing (macOS, the BSDs) ``time.monotonic()`` is the
best there is; docs/concepts/loss.md says what that leaves uncovered.
"""

from __future__ import annotations

import time
from functools import partial

#: The clock id, for kernel timers that must fire on the same clock.
CLOCK_ID: int | None = getattr(time, "CLOCK_BOOTTIME", None)

#: Seconds on the trust-window clock (counts suspended time where it can).
now = partial(time.clock_gettime, CLOCK_ID) if CLOCK_ID is not None else time.monotonic

__all__ = ["CLOCK_ID", "now"]

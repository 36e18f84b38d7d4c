"""The one timing rule of a loss, in shares of the margin, counted from *W*:
the moment the trust window closed, or the store refused a renewal if that
came first. Every path that stops a job keeps it, in a keeper process or in
the job's own thread; ``proof/lease.pml`` states it too, and a test checks
that the two agree (tests/proof/test_timing_rule.py).

- ``LADDER_ENDS``: the job's own steps (log line, ``on_lost`` callbacks, the
  faces' stop hooks) end, ``grace`` before it;
- ``STOP_BEGINS``: the tree is frozen and ended (the keeper's hard stop, or
  the job's own freeze), ``grace`` before it;
- ``STOP_SHARE``: everything the job started is gone (the descendants'
  ``grace`` between SIGTERM and SIGKILL included);
- ``TIMER_SHARE``: the keeper's own kernel timer fires (a keeper that is
  stuck dies, and its death pipe kills the job's group);
- ``DRIFT_SHARE``, the rest: for the holder's clock running slower than the
  store's. The store cannot grant the lease again before ``W + margin``.

Hence ``grace <= margin / 2`` (``LeaseLock`` checks it): the steps then get at
least ``0.1 * margin``.
"""

from __future__ import annotations

LADDER_ENDS = 0.6
STOP_BEGINS = 0.7
STOP_SHARE = 0.8
TIMER_SHARE = 0.9
DRIFT_SHARE = 0.2


def lost_at(now: float, trusted_until: float) -> float:
    """*W*: the window's close, or ``now`` (a refusal) if that is earlier."""
    return min(now, trusted_until)


def ladder_ends(w: float, margin: float, grace: float) -> float:
    return w + LADDER_ENDS * margin - grace


def stop_at(w: float, margin: float, grace: float) -> float:
    return w + STOP_BEGINS * margin - grace


def timer_at(trusted_until: float, margin: float) -> float:
    return trusted_until + TIMER_SHARE * margin


__all__ = ["DRIFT_SHARE", "LADDER_ENDS", "STOP_BEGINS", "STOP_SHARE", "TIMER_SHARE",
           "ladder_ends", "lost_at", "stop_at", "timer_at"]

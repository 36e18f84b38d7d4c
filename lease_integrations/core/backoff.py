"""Jittered backoff for waiters, so a crowd of waiters does not stampede the
store in lock-step when a lease is released."""

from __future__ import annotations

import random


class Backoff:
    """Exponential delays with "full jitter" between ``base`` and ``cap``."""

    def __init__(self, base: float = 0.02, cap: float = 1.0, factor: float = 2.0) -> None:
        self.base = base
        self.cap = cap
        self.factor = factor
        self._attempt = 0

    def next_delay(self) -> float:
        ceiling = min(self.cap, self.base * self.factor**self._attempt)
        self._attempt += 1
        return random.uniform(ceiling / 2, ceiling)

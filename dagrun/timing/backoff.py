"""Backoff with full jitter (DESIGN section 5): for a task's retries, and for a loop that
retries its step while the database is away.

Full jitter spreads the retries of many tasks (or processes) that failed together (a
database blip) across the whole window instead of stampeding at the same instant.
"""

from __future__ import annotations

import random


def backoff_delay(
    failures: int,
    retry_delay: float,
    max_retry_delay: float,
    exponential: bool = True,
    rng: random.Random | None = None,
) -> float:
    """Seconds to wait after the ``failures``-th failed try: uniform(0, min(cap, base*2**(n-1)))."""
    if not exponential:
        return min(retry_delay, max_retry_delay)
    ceiling = min(max_retry_delay, retry_delay * 2 ** min(max(failures - 1, 0), 62))
    return (rng or random).uniform(0, ceiling)


class Backoff:
    """The delays between retries of one loop's step: ``backoff_delay`` after each failure
    in a row (a window of ``first`` seconds, doubling up to ``cap``), from the start again
    once the step succeeds (``reset``)."""

    def __init__(
        self, first: float = 0.1, cap: float = 5.0, rng: random.Random | None = None
    ) -> None:
        self.first = first
        self.cap = cap
        self.rng = rng
        self.failures = 0

    def next(self) -> float:
        self.failures += 1
        return backoff_delay(self.failures, self.first, self.cap, rng=self.rng)

    def reset(self) -> None:
        self.failures = 0

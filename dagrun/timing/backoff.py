"""Retry timing: exponential backoff with full jitter (DESIGN section 5).

Full jitter spreads the retries of many tasks that failed together (a database blip) across
the whole window instead of stampeding at the same instant.
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

"""Tests for dagrun.timing.backoff: exponential backoff with full jitter (DESIGN section 5)."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from dagrun.timing.backoff import Backoff, backoff_delay

SAMPLES = 1000


def cap(failures: int, base: float, maximum: float) -> float:
    """The top of the jitter window, written out independently of the code under test."""
    return min(maximum, base * 2 ** (failures - 1))


@pytest.mark.parametrize(
    ("failures", "base", "maximum"),
    [
        (1, 10.0, 600.0),
        (2, 10.0, 600.0),
        (3, 10.0, 600.0),
        (6, 10.0, 600.0),
        (7, 10.0, 600.0),
        (12, 10.0, 600.0),
        (4, 1.5, 1000.0),
        (1, 30.0, 5.0),
    ],
)
def test_full_jitter_stays_in_the_window_and_spreads_across_it(failures, base, maximum):
    rng = random.Random(1234 + failures)
    top = cap(failures, base, maximum)
    delays = [backoff_delay(failures, base, maximum, rng=rng) for _ in range(SAMPLES)]
    assert all(0 <= d <= top for d in delays)
    # Uniform(0, top): mean top/2 (standard error top/sqrt(12 * 1000) ~ 0.009 top).
    assert statistics.fmean(delays) == pytest.approx(top / 2, rel=0.08)
    deciles = [0] * 10
    for d in delays:
        deciles[min(int(d / top * 10), 9)] += 1
    assert min(deciles) >= 60, deciles  # about 100 expected in each tenth
    assert max(deciles) <= 140, deciles
    assert len(set(delays)) > SAMPLES * 0.99


def test_the_window_doubles_until_the_cap():
    rng = random.Random(7)
    tops = []
    for failures in range(1, 10):
        delays = [backoff_delay(failures, 10.0, 600.0, rng=rng) for _ in range(SAMPLES)]
        tops.append(max(delays))
    expected = [10, 20, 40, 80, 160, 320, 600, 600, 600]
    for seen, top in zip(tops, expected, strict=True):
        assert top * 0.97 <= seen <= top


def test_seeded_generators_give_the_same_delays():
    one = [backoff_delay(3, 10, 600, rng=random.Random(42)) for _ in range(5)]
    two = [backoff_delay(3, 10, 600, rng=random.Random(42)) for _ in range(5)]
    assert one == two


def test_without_a_generator_the_module_random_is_used():
    random.seed(99)
    first = backoff_delay(5, 10, 600)
    random.seed(99)
    assert backoff_delay(5, 10, 600) == first
    assert 0 <= first <= 160


@pytest.mark.parametrize(
    ("failures", "base", "maximum", "expected"),
    [
        (1, 10.0, 600.0, 10.0),
        (9, 10.0, 600.0, 10.0),
        (50, 3.0, 600.0, 3.0),
        (1, 900.0, 600.0, 600.0),
    ],
)
def test_non_exponential_gives_the_fixed_delay(failures, base, maximum, expected):
    rng = random.Random(0)
    delays = {backoff_delay(failures, base, maximum, exponential=False, rng=rng) for _ in range(50)}
    assert delays == {expected}


@pytest.mark.parametrize("failures", [64, 1000, 10**6, 10**18])
def test_huge_try_numbers_do_not_overflow(failures):
    rng = random.Random(failures % 1000)
    delays = [backoff_delay(failures, 10.0, 600.0, rng=rng) for _ in range(200)]
    assert all(math.isfinite(d) and 0 <= d <= 600.0 for d in delays)
    assert max(delays) > 500


def test_huge_base_delay_is_capped():
    rng = random.Random(3)
    delays = [backoff_delay(80, 1e300, 600.0, rng=rng) for _ in range(200)]
    assert all(0 <= d <= 600.0 for d in delays)


@pytest.mark.parametrize("failures", [0, -3])
def test_nonsense_try_numbers_use_the_first_window(failures):
    rng = random.Random(5)
    delays = [backoff_delay(failures, 10.0, 600.0, rng=rng) for _ in range(200)]
    assert all(0 <= d <= 10.0 for d in delays)


def test_zero_delay_means_retry_at_once():
    assert backoff_delay(3, 0.0, 600.0, rng=random.Random(1)) == 0.0
    assert backoff_delay(3, 0.0, 600.0, exponential=False) == 0.0


def test_a_loops_backoff_doubles_its_window_up_to_the_cap_and_starts_again_on_reset():
    """The n-th failure in a row waits up to min(cap, first * 2**(n-1)), spread over it."""
    for failures, window in enumerate([0.1, 0.2, 0.4, 0.5, 0.5, 0.5], start=1):
        delays = []
        for seed in range(200):
            backoff = Backoff(first=0.1, cap=0.5, rng=random.Random(seed))
            delays += [backoff.next() for _ in range(failures)][-1:]
        assert window * 0.9 < max(delays) <= window, failures
    backoff.reset()
    assert backoff.failures == 0 and backoff.next() <= 0.1

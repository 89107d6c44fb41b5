"""``outage.ride_out``, the one loop of every long-running role's thread: it retries a
database error after a backoff, and hands on what it cannot ride out."""

from __future__ import annotations

import threading

from dagrun.errors import OutageTooLong, StoreConflict, StoreUnavailable, UsageError
from dagrun.store.outage import Health, ride_out
from dagrun.timing.backoff import Backoff


class Turns:
    """A turn that raises the errors it is given, one per turn, then stops the loop."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.count = 0
        self.stopped = threading.Event()
        self.failed: list[BaseException] = []

    def __call__(self) -> float:
        self.count += 1
        if self.errors:
            raise self.errors.pop(0)
        self.stopped.set()
        return 0.0


def test_database_errors_are_retried_and_the_backoff_starts_again_after_a_success():
    turns = Turns(StoreConflict("lost a race"), StoreUnavailable("connection refused"))
    backoff = Backoff(first=0.001)
    ride_out(turns, turns.stopped, turns.failed.append, health=None, what="t", backoff=backoff)
    assert turns.count == 3 and not turns.failed
    assert backoff.failures == 0


def test_the_loop_waits_what_each_turn_returns_until_stopped():
    stopped = threading.Event()
    waits = []

    def turn() -> float:
        waits.append(len(waits))
        if len(waits) == 3:
            stopped.set()
        return 0.01

    ride_out(turn, stopped, waits.append, health=None, what="t")
    assert waits == [0, 1, 2]


def test_past_the_outage_limit_the_error_goes_to_fail_and_the_loop_ends():
    health = Health(limit=0.0)
    error = StoreUnavailable("connection refused")
    health.failed(error)
    turns = Turns(error, error, error)
    ride_out(turns, turns.stopped, turns.failed.append, health=health, what="t")
    assert turns.count == 1
    assert isinstance(turns.failed[0], OutageTooLong)


def test_another_dagrun_error_is_a_bug_that_ends_the_loop():
    bug = UsageError("no such DAG")
    turns = Turns(bug)
    ride_out(turns, turns.stopped, turns.failed.append, health=None, what="t")
    assert turns.failed == [bug] and turns.count == 1


def test_health_says_how_long_the_database_has_answered():
    health = Health(limit=60)
    assert health.answered_for(3600)  # never away
    health.failed(StoreUnavailable("connection refused"))
    assert not health.answered_for(0)
    health.ok()
    assert health.answered_for(0) and not health.answered_for(60)

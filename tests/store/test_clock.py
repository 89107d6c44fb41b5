"""Tests for dagrun.store.clock: measuring this host's clock against the database's, and
what a long-running process says about it."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from dagrun.store import clock
from dagrun.timing.instants import OFFSET_ENV, decision_now


def test_measure_is_none_where_the_host_clock_is_the_only_one(sqlite_store):
    assert clock.measure(sqlite_store) is None


def test_measure_reads_the_server_clock_on_postgres(pg_url):
    from dagrun.store import Store

    store = Store(pg_url)
    try:
        skew = clock.measure(store)
    finally:
        store.dispose()
    assert skew is not None
    assert abs(skew.seconds) < 2  # the same host's clock on both sides


def test_a_skew_names_both_clocks_and_which_is_ahead():
    database = datetime(2026, 12, 2, 20, 57, tzinfo=UTC)
    skew = clock.Skew(database, database + timedelta(hours=3))
    assert skew.seconds == -10800
    assert skew.describe() == (
        "this host's clock (2026-12-02T23:57:00+00:00) is 10800.0 s ahead of the database's "
        "(2026-12-02T20:57:00+00:00); the database's decides what is due"
    )


class FakeTime:
    def __init__(self) -> None:
        self.wall = 1_000_000.0
        self.mono = 50.0

    def time(self) -> float:
        return self.wall

    def monotonic(self) -> float:
        return self.mono


@pytest.fixture
def fake_time(monkeypatch) -> FakeTime:
    fake = FakeTime()
    monkeypatch.setattr(clock, "time", fake)
    return fake


def watch_with(monkeypatch, offsets: list[float]) -> clock.ClockWatch:
    """A watch whose measurements return these differences in turn, measuring every call."""
    base = datetime(2026, 12, 2, tzinfo=UTC)
    found = iter(offsets)
    monkeypatch.setattr(
        clock, "measure", lambda store: clock.Skew(base + timedelta(seconds=next(found)), base)
    )
    monkeypatch.setenv(OFFSET_ENV, "0")  # restored after the test, whatever the watch sets
    return clock.ClockWatch(SimpleNamespace(), every=0, process=clock.ProcessClock())


def test_a_skew_is_said_once_and_again_when_it_changes(monkeypatch, fake_time, caplog):
    watch = watch_with(monkeypatch, [0.5, 30, 31, 29, 60, 1])
    with caplog.at_level(logging.WARNING, logger="dagrun.clock"):
        for _ in range(6):
            watch.check()
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 3
    assert "30.0 s behind" in said[0] and "60.0 s behind" in said[1]
    assert said[2] == "this host's clock is within 5 s of the database's again"


def test_the_measured_difference_reaches_task_processes(monkeypatch, fake_time):
    watch = watch_with(monkeypatch, [-7200])
    watch.check()
    monkeypatch.setattr(clock, "time", __import__("time"))
    assert abs((decision_now() - datetime.now(UTC)).total_seconds() + 7200) < 1


def test_a_step_of_the_host_clock_is_logged_as_a_jump(monkeypatch, fake_time, caplog):
    watch = watch_with(monkeypatch, [0.0] * 3)
    with caplog.at_level(logging.WARNING, logger="dagrun.clock"):
        fake_time.wall += 10
        fake_time.mono += 10
        watch.check()  # time passing is no jump
        fake_time.wall -= 3700
        fake_time.mono += 1
        watch.check()
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == [
        "this host's clock jumped back by 3701 s"
    ]


def test_two_watches_of_one_process_say_a_skew_and_a_jump_once(monkeypatch, fake_time, caplog):
    base = datetime(2026, 12, 2, tzinfo=UTC)
    monkeypatch.setattr(clock, "measure", lambda store: clock.Skew(base, base + timedelta(hours=1)))
    monkeypatch.setenv(OFFSET_ENV, "0")
    process = clock.ProcessClock()
    watches = [clock.ClockWatch(SimpleNamespace(), every=0, process=process) for _ in range(2)]
    with caplog.at_level(logging.WARNING, logger="dagrun.clock"):
        for watch in watches:
            watch.check()
        fake_time.wall -= 3600
        for watch in watches:
            watch.check()
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2
    assert "3600.0 s ahead" in said[0] and said[1].startswith(
        "this host's clock jumped back by 3600 s"
    )

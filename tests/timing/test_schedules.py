"""Tests for the schedule objects (dagrun.timing.schedules) and the trigger timetable: pure,
database-free, the clock passed in.

A trigger schedule fires at its cron times under the same DST rule as every cron schedule,
so the hand-worked tables of test_timetable apply to its fire times unchanged. Offsets used
below: America/New_York EST -5 / EDT -4 (change 2025-03-09 02:00 -> 03:00 and 2025-11-02
02:00 -> 01:00); Asia/Dhaka +6 all year.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import date, timedelta

import pytest

from dagrun.errors import ScheduleError
from dagrun.timing.schedules import CronIntervals, CronTrigger, DeltaIntervals, from_data
from dagrun.timing.timetable import (
    CronTimetable,
    CronTriggerTimetable,
    DataInterval,
    DeltaTimetable,
    make_timetable,
)
from tests.timing.test_timetable import DAY_COUNTS, DHAKA, DST_CASES, NY, u


def fires(schedule, zone: str, first: str, last: str, start="2024-01-01") -> list:
    timetable = make_timetable(schedule, zone, start_date=start)
    return [interval.end for interval in timetable.intervals(u(first), u(last))]


# --- the trigger schedule -----------------------------------------------------------------------


def test_a_trigger_run_is_due_at_its_fire_time_which_is_its_logical_date():
    timetable = make_timetable(CronTrigger("0 1 * * *"), DHAKA, start_date="2026-01-01")
    assert isinstance(timetable, CronTriggerTimetable)
    first = u("2025-12-31 19:00")  # 01:00 in Dhaka on the 1st
    assert timetable.next_interval(None) == DataInterval(first, first)
    assert timetable.due_intervals(None, first - timedelta(microseconds=1), True) == []
    assert timetable.due_intervals(None, first, True) == [DataInterval(first, first)]
    assert timetable.description == "trigger 0 1 * * *"


def test_a_trigger_interval_is_the_data_before_each_fire():
    """Airflow's CronTriggerTimetable(interval=...): DagRunInfo.interval(fire - interval,
    fire), so the logical date is the interval's start and the run is due at the fire."""
    schedule = CronTrigger("0 1 * * *", interval="2h")
    timetable = make_timetable(schedule, "UTC", start_date="2026-01-01T01:00")
    got = list(timetable.intervals(u("2025-12-31 00:00"), u("2026-01-02 00:00")))
    assert got == [
        DataInterval(u("2025-12-31 23:00"), u("2026-01-01 01:00")),
        DataInterval(u("2026-01-01 23:00"), u("2026-01-02 01:00")),
    ], "start_date bounds fire times: the first run's data begins before it"
    assert timetable.description == "trigger 0 1 * * * covering 2:00:00"


def test_a_trigger_schedules_end_date_bounds_its_fires_inclusively():
    schedule = CronTrigger("0 1 * * *", interval="1h")
    timetable = make_timetable(
        schedule, "UTC", start_date="2026-01-01", end_date="2026-01-03T01:00"
    )
    got = [i.end for i in timetable.intervals(u("2026-01-01"), u("2026-02-01"))]
    assert got == [u("2026-01-01 01:00"), u("2026-01-02 01:00"), u("2026-01-03 01:00")]
    assert timetable.next_interval(u("2026-01-03 00:00")) is None


@pytest.mark.parametrize(
    ("schedule", "zone", "first", "last", "expected"),
    [case[1:] for case in DST_CASES],
    ids=[case[0] for case in DST_CASES],
)
def test_trigger_fires_follow_the_dst_rule_of_cron_schedules(schedule, zone, first, last, expected):
    got = fires(CronTrigger(schedule), zone, first, last)
    assert got == [u(text) for text in expected]


@pytest.mark.parametrize(("zone", "schedule", "first", "last", "count"), DAY_COUNTS)
def test_trigger_runs_on_change_days_follow_real_time(zone, schedule, first, last, count):
    got = fires(CronTrigger(schedule), zone, first, last)
    assert len(got) == len(set(got)) == count


def test_a_skipped_trigger_time_fires_at_the_end_of_the_gap_with_its_note():
    timetable = make_timetable(CronTrigger("30 2 * * *"), NY, start_date="2025-03-01")
    [before, moved, after] = timetable.occurrences(u("2025-03-08 00:00"), 3)
    assert [o.interval.start for o in (before, moved, after)] == [
        u("2025-03-08 07:30"),  # 02:30 EST
        u("2025-03-09 07:00"),  # 02:30 does not exist: 03:00 EDT
        u("2025-03-10 06:30"),  # 02:30 EDT
    ]
    assert moved.dst_note == "moved: 02:30 skipped by DST, fires at 03:00 EDT"
    assert before.dst_note is None is after.dst_note


def test_a_repeated_trigger_time_fires_once_at_its_first_occurrence():
    timetable = make_timetable(CronTrigger("30 1 * * *"), NY, start_date="2025-11-01")
    got = fires(CronTrigger("30 1 * * *"), NY, "2025-11-01 00:00", "2025-11-03 12:00")
    assert got == [u("2025-11-01 05:30"), u("2025-11-02 05:30"), u("2025-11-03 06:30")]
    assert timetable.logical_date_on_day(date(2025, 11, 2)) == u("2025-11-02 05:30")


def test_trigger_catchup_false_creates_only_the_latest_fire():
    timetable = make_timetable(CronTrigger("0 * * * *"), "UTC", start_date="2026-01-01")
    latest = u("2026-01-05 12:00")
    assert timetable.due_intervals(None, u("2026-01-05 12:30"), False) == [
        DataInterval(latest, latest)
    ]
    assert len(timetable.due_intervals(None, u("2026-01-01 05:00"), True)) == 6


def test_a_trigger_schedules_logical_date_on_a_day_is_that_days_fire():
    timetable = make_timetable(CronTrigger("30 6 * * *"), DHAKA, start_date="2026-01-01")
    assert timetable.logical_date_on_day(date(2026, 1, 5)) == u("2026-01-05 00:30")


# --- no start_date: run_immediately ------------------------------------------------------------

HOURLY_NOW = u("2026-01-05 12:06")  # 6 minutes after a fire, 54 before the next


@pytest.mark.parametrize(
    ("run_immediately", "now", "first"),
    [
        (False, HOURLY_NOW, "2026-01-05 13:00"),
        (True, HOURLY_NOW, "2026-01-05 12:00"),
        (True, u("2026-01-05 12:59"), "2026-01-05 12:00"),
        (timedelta(minutes=6), HOURLY_NOW, "2026-01-05 12:00"),
        (timedelta(minutes=5), HOURLY_NOW, "2026-01-05 13:00"),
        ("10m", HOURLY_NOW, "2026-01-05 12:00"),
        (None, HOURLY_NOW, "2026-01-05 12:00"),  # within a tenth of the hour
        (None, u("2026-01-05 12:07"), "2026-01-05 13:00"),
        (False, u("2026-01-05 12:00"), "2026-01-05 12:00"),  # now is a fire: it is both
    ],
)
def test_without_a_start_date_run_immediately_picks_the_first_run(run_immediately, now, first):
    """Airflow's documented meaning: True the latest past fire, False the next one, a
    duration the past one if no older than it, None the past one within 10% of the gap
    (at least 5 minutes, as Airflow 3 computes it)."""
    schedule = CronTrigger("0 * * * *", run_immediately=run_immediately)
    timetable = make_timetable(schedule, "UTC")
    assert timetable.start is None and timetable.next_interval(None) is None
    cursor = timetable.first_cursor(now)
    assert cursor == u(first)
    assert timetable.due_intervals(cursor, u(first), True)[0].start == u(first)


def test_run_immediately_none_waits_at_most_five_minutes_back_for_a_frequent_schedule():
    every_ten = make_timetable(CronTrigger("*/10 * * * *", run_immediately=None), "UTC")
    assert every_ten.first_cursor(u("2026-01-05 12:05")) == u("2026-01-05 12:00")
    assert every_ten.first_cursor(u("2026-01-05 12:06")) == u("2026-01-05 12:10")


def test_run_immediately_finds_a_past_fire_far_back_and_ignores_a_start_date():
    yearly = make_timetable(CronTrigger("0 0 1 1 *", run_immediately=True), "UTC")
    assert yearly.first_cursor(u("2026-12-31 00:00")) == u("2026-01-01 00:00")
    dated = make_timetable(CronTrigger("0 0 1 1 *", run_immediately=True), "UTC", "2020-01-01")
    assert dated.first_cursor(u("2026-12-31 00:00")) is None, "start_date decides"
    assert make_timetable("@daily", "UTC", "2026-01-01").first_cursor(u("2026-01-05")) is None


def test_the_first_run_without_a_start_date_has_its_interval_before_the_fire():
    schedule = CronTrigger("0 1 * * *", interval="1d", run_immediately=True)
    timetable = make_timetable(schedule, "UTC")
    assert timetable.first_cursor(u("2026-01-05 12:00")) == u("2026-01-04 01:00")


# --- the data-interval objects and their own zones ---------------------------------------------


def test_cron_intervals_mean_what_a_cron_string_means():
    as_text = make_timetable("30 2 * * *", NY, start_date="2025-03-01")
    as_object = make_timetable(CronIntervals("30 2 * * *"), NY, start_date="2025-03-01")
    assert type(as_object) is CronTimetable and as_object.description == "30 2 * * *"
    window = (u("2025-03-01"), u("2025-03-20"))
    assert list(as_object.intervals(*window)) == list(as_text.intervals(*window))


def test_a_schedules_own_timezone_reads_its_cron_and_the_dags_zone_stays():
    timetable = make_timetable(
        CronIntervals("0 1 * * *", timezone=DHAKA), "UTC", start_date="2026-01-01"
    )
    assert timetable.next_interval(None) == DataInterval(
        u("2026-01-01 19:00"), u("2026-01-02 19:00")
    ), "01:00 in Dhaka, the first at or after midnight UTC on the 1st"
    assert timetable.tz.key == "UTC" and timetable.description == "0 1 * * * (Asia/Dhaka)"
    trigger = make_timetable(CronTrigger("0 1 * * *", timezone=NY), DHAKA, "2026-01-01")
    assert trigger.next_interval(None).end == u("2026-01-01 06:00")  # 01:00 EST


def test_delta_intervals_mean_what_a_timedelta_means():
    as_object = make_timetable(DeltaIntervals("12h"), NY, start_date="2025-03-08T07:00")
    as_delta = make_timetable(timedelta(hours=12), NY, start_date="2025-03-08T07:00")
    assert isinstance(as_object, DeltaTimetable) and as_object.description == "every 12:00:00"
    window = (u("2025-03-08"), u("2025-03-12"))
    assert list(as_object.intervals(*window)) == list(as_delta.intervals(*window))


@pytest.mark.parametrize(
    "schedule",
    [
        CronTrigger("0 1 * * *"),
        CronTrigger("30 2 * * 1-5", timezone=NY, interval="90m", run_immediately=None),
        CronTrigger("@hourly", run_immediately=timedelta(minutes=10)),
        CronTrigger("0 0 * * *", run_immediately=True),
        CronIntervals("0 1 * * *", DHAKA),
        DeltaIntervals(timedelta(minutes=45)),
    ],
    ids=repr,
)
def test_schedule_objects_round_trip_through_their_stored_form(schedule):
    assert from_data(schedule.to_data()) == schedule
    stored = make_timetable(schedule.to_data(), "UTC", start_date="2026-01-01")
    made = make_timetable(schedule, "UTC", start_date="2026-01-01")
    window = (u("2026-01-01"), u("2026-01-10"))
    assert list(stored.intervals(*window)) == list(made.intervals(*window))


READS_A_STORED_TRIGGER = """
import sys
from dagrun.timing.timetable import make_timetable
data = {"kind": "cron_trigger", "cron": "30 2 * * 1-5", "timezone": "Europe/Berlin",
        "interval": 3600.0, "run_immediately": False}
tt = make_timetable(data, "UTC", "2026-03-23", None, cron=((30,), (2,), ("*",), ("*",),
                    (1, 2, 3, 4, 5)))
print(*[str(o.interval.start) for o in tt.occurrences(None, 3)], sep=",")
print("croniter" in sys.modules)
"""


def test_a_stored_trigger_schedule_is_rebuilt_without_croniter():
    out = subprocess.run(
        [sys.executable, "-c", READS_A_STORED_TRIGGER],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    # 02:30 CET (+1) on Monday 23 March and the days after, each covering the hour before
    starts = ["2026-03-23 00:30:00+00:00", "2026-03-24 00:30:00+00:00", "2026-03-25 00:30:00+00:00"]
    assert out.stdout.splitlines() == [",".join(starts), "False"]


ERRORS = [
    (lambda: CronTrigger("@once"), r"^CronTrigger needs a cron expression"),
    (lambda: CronTrigger("61 * * * *"), r"^invalid cron expression '61 \* \* \* \*'"),
    (lambda: CronTrigger("@daily", timezone="Mars/Olympus"), r"^unknown timezone"),
    (lambda: CronTrigger("@daily", timezone=5), r"timezone must be an IANA name"),
    (lambda: CronTrigger("@daily", interval="-1h"), r"^CronTrigger\('@daily'\) interval:"),
    (lambda: CronTrigger("@daily", run_immediately="soon"), r"run_immediately: invalid"),
    (lambda: CronIntervals(3), r"^CronIntervals needs a cron expression"),
    (lambda: DeltaIntervals(0), r"^DeltaIntervals\(0\) must be positive"),
    (lambda: DeltaIntervals("often"), r"^DeltaIntervals: invalid duration 'often'"),
    (lambda: make_timetable(CronIntervals("@daily")), r"^start_date is required"),
    (lambda: make_timetable(DeltaIntervals("1h")), r"^start_date is required"),
    (lambda: from_data({"kind": "lunar"}), r"^unknown stored schedule"),
]


@pytest.mark.parametrize(("make", "message"), ERRORS)
def test_bad_schedule_objects_are_one_line_errors(make, message):
    with pytest.raises(ScheduleError, match=message) as caught:
        make()
    assert "\n" not in str(caught.value)

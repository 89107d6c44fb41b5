"""Tests for dagrun.timing.timetable: DESIGN.md section 3 (time semantics), pure and database-free.

Every expected instant below was worked out by hand from the zone's offsets (noted next to
each case), never by running the code under test. Offsets used:
America/New_York EST -5 / EDT -4, change 2025-03-09 02:00 -> 03:00 and 2025-11-02 02:00 -> 01:00;
Europe/London GMT +0 / BST +1, change 2025-03-30 01:00 -> 02:00 and 2025-10-26 02:00 -> 01:00;
Australia/Lord_Howe +10:30 / +11, change 2025-04-06 02:00 -> 01:30 and 2025-10-05 02:00 -> 02:30;
Asia/Dhaka +6 all year.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time as clock
from datetime import UTC, date, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter

from dagrun.errors import ScheduleError, UsageError
from dagrun.timing.instants import (
    get_zone,
    parse_cli_instant,
    parse_cli_range,
    parse_duration,
    spread_offset,
    to_utc,
)
from dagrun.timing.timetable import (
    CronTimetable,
    DataInterval,
    DeltaTimetable,
    NullTimetable,
    OnceTimetable,
    Timetable,
    make_timetable,
)

NY = "America/New_York"
LONDON = "Europe/London"
LORD_HOWE = "Australia/Lord_Howe"
DHAKA = "Asia/Dhaka"
REPO = Path(__file__).resolve().parents[2]


def u(text: str) -> datetime:
    """A UTC instant written 'YYYY-MM-DD HH:MM[:SS[.ffffff]]', the notation of the tables."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def logical_dates(schedule: str, zone: str, first: str, last: str) -> list[datetime]:
    timetable = make_timetable(schedule, zone, start_date="2024-01-01")
    return [interval.start for interval in timetable.intervals(u(first), u(last))]


# (id, schedule, zone, window first UTC, window last UTC, expected logical dates in UTC)
DST_CASES = [
    # --- New York, spring forward 2025-03-09: 02:00 EST -> 03:00 EDT (07:00Z) ---
    ("ny-spring-0130", "30 1 * * *", NY, "2025-03-08 00:00", "2025-03-10 12:00",
     ["2025-03-08 06:30", "2025-03-09 06:30", "2025-03-10 05:30"]),
    # 02:30 does not exist on the 9th: fires once at 03:00 EDT
    ("ny-spring-0230", "30 2 * * *", NY, "2025-03-08 00:00", "2025-03-10 12:00",
     ["2025-03-08 07:30", "2025-03-09 07:00", "2025-03-10 06:30"]),
    ("ny-spring-0000", "0 0 * * *", NY, "2025-03-08 00:00", "2025-03-10 12:00",
     ["2025-03-08 05:00", "2025-03-09 05:00", "2025-03-10 04:00"]),
    # 23:00 EST, 00:00 EST, 01:00 EST, (02:00 skipped), 03:00 EDT, 04:00 EDT, 05:00 EDT
    ("ny-spring-hourly", "0 * * * *", NY, "2025-03-09 04:00", "2025-03-09 09:00",
     ["2025-03-09 04:00", "2025-03-09 05:00", "2025-03-09 06:00", "2025-03-09 07:00",
      "2025-03-09 08:00", "2025-03-09 09:00"]),
    # 01:30 EST, 01:45 EST, 03:00 EDT, 03:15 EDT, 03:30 EDT
    ("ny-spring-15min", "*/15 * * * *", NY, "2025-03-09 06:30", "2025-03-09 07:30",
     ["2025-03-09 06:30", "2025-03-09 06:45", "2025-03-09 07:00", "2025-03-09 07:15",
      "2025-03-09 07:30"]),
    # Sundays 03-02 02:00 EST, 03-09 02:00 skipped -> 03:00 EDT, 03-16 02:00 EDT
    ("ny-spring-weekly", "0 2 * * 0", NY, "2025-03-01 00:00", "2025-03-17 00:00",
     ["2025-03-02 07:00", "2025-03-09 07:00", "2025-03-16 06:00"]),
    ("ny-spring-monthly", "30 2 1 * *", NY, "2025-02-15 00:00", "2025-04-15 00:00",
     ["2025-03-01 07:30", "2025-04-01 06:30"]),
    # March 9th: before DST in 2024 (EST), the change day in 2025, after it in 2026 (EDT)
    ("ny-change-day-monthly", "30 2 9 3 *", NY, "2024-01-01 00:00", "2026-12-31 00:00",
     ["2024-03-09 07:30", "2025-03-09 07:00", "2026-03-09 06:30"]),
    # 02:00 and 02:30 both fall in the gap: one occurrence at 03:00 EDT
    ("ny-spring-merged", "0,30 2 * * *", NY, "2025-03-08 00:00", "2025-03-10 12:00",
     ["2025-03-08 07:00", "2025-03-08 07:30", "2025-03-09 07:00", "2025-03-10 06:00",
      "2025-03-10 06:30"]),
    # the skipped 02:00 lands on 03:00 EDT, which fires anyway: one occurrence
    ("ny-spring-merged-0300", "0 2,3 * * *", NY, "2025-03-08 00:00", "2025-03-10 12:00",
     ["2025-03-08 07:00", "2025-03-08 08:00", "2025-03-09 07:00", "2025-03-10 06:00",
      "2025-03-10 07:00"]),
    # --- New York, fall back 2025-11-02: 02:00 EDT -> 01:00 EST (06:00Z) ---
    # 01:30 happens twice on the 2nd: only the first (EDT) fires
    ("ny-fall-0130", "30 1 * * *", NY, "2025-11-01 00:00", "2025-11-03 12:00",
     ["2025-11-01 05:30", "2025-11-02 05:30", "2025-11-03 06:30"]),
    ("ny-fall-0230", "30 2 * * *", NY, "2025-11-01 00:00", "2025-11-03 12:00",
     ["2025-11-01 06:30", "2025-11-02 07:30", "2025-11-03 07:30"]),
    ("ny-fall-0000", "0 0 * * *", NY, "2025-11-01 00:00", "2025-11-03 12:00",
     ["2025-11-01 04:00", "2025-11-02 04:00", "2025-11-03 05:00"]),
    # 00:00 EDT, 01:00 EDT, 01:00 EST, 02:00 EST, 03:00 EST
    ("ny-fall-hourly", "0 * * * *", NY, "2025-11-02 04:00", "2025-11-02 08:00",
     ["2025-11-02 04:00", "2025-11-02 05:00", "2025-11-02 06:00", "2025-11-02 07:00",
      "2025-11-02 08:00"]),
    # the repeated hour in real time: 01:00-01:45 EDT, then 01:00-01:45 EST, then 02:00 EST
    ("ny-fall-15min", "*/15 * * * *", NY, "2025-11-02 05:00", "2025-11-02 07:00",
     ["2025-11-02 05:00", "2025-11-02 05:15", "2025-11-02 05:30", "2025-11-02 05:45",
      "2025-11-02 06:00", "2025-11-02 06:15", "2025-11-02 06:30", "2025-11-02 06:45",
      "2025-11-02 07:00"]),
    ("ny-fall-weekly", "0 2 * * 0", NY, "2025-10-25 00:00", "2025-11-10 00:00",
     ["2025-10-26 06:00", "2025-11-02 07:00", "2025-11-09 07:00"]),
    ("ny-fall-monthly", "30 2 1 * *", NY, "2025-10-15 00:00", "2025-12-15 00:00",
     ["2025-11-01 06:30", "2025-12-01 07:30"]),
    # November 2nd: EDT in 2024, the change day in 2025 (first 01:30), EST in 2026
    ("ny-fall-change-day-monthly", "30 1 2 11 *", NY, "2024-01-01 00:00", "2026-12-31 00:00",
     ["2024-11-02 05:30", "2025-11-02 05:30", "2026-11-02 06:30"]),
    # a range is fixed-time (no * or /): 01:00 once, 02:00 EST, 03:00 EST
    ("ny-fall-range-fixed", "0 1-3 * * *", NY, "2025-11-02 04:30", "2025-11-02 08:30",
     ["2025-11-02 05:00", "2025-11-02 07:00", "2025-11-02 08:00"]),
    # the same hours with a step follow real time: 01:00 fires twice
    ("ny-fall-range-step", "0 1-3/1 * * *", NY, "2025-11-02 04:30", "2025-11-02 08:30",
     ["2025-11-02 05:00", "2025-11-02 06:00", "2025-11-02 07:00", "2025-11-02 08:00"]),
    # --- London, spring forward 2025-03-30: 01:00 GMT -> 02:00 BST (01:00Z) ---
    ("london-spring-0130", "30 1 * * *", LONDON, "2025-03-29 00:00", "2025-03-31 12:00",
     ["2025-03-29 01:30", "2025-03-30 01:00", "2025-03-31 00:30"]),
    ("london-spring-0230", "30 2 * * *", LONDON, "2025-03-29 00:00", "2025-03-31 12:00",
     ["2025-03-29 02:30", "2025-03-30 01:30", "2025-03-31 01:30"]),
    ("london-spring-0000", "0 0 * * *", LONDON, "2025-03-29 00:00", "2025-03-31 12:00",
     ["2025-03-29 00:00", "2025-03-30 00:00", "2025-03-30 23:00"]),
    # 00:00 GMT, (01:00 skipped), 02:00 BST, 03:00 BST
    ("london-spring-hourly", "0 * * * *", LONDON, "2025-03-30 00:00", "2025-03-30 02:00",
     ["2025-03-30 00:00", "2025-03-30 01:00", "2025-03-30 02:00"]),
    ("london-spring-15min", "*/15 * * * *", LONDON, "2025-03-30 00:30", "2025-03-30 01:30",
     ["2025-03-30 00:30", "2025-03-30 00:45", "2025-03-30 01:00", "2025-03-30 01:15",
      "2025-03-30 01:30"]),
    ("london-spring-weekly", "0 2 * * 0", LONDON, "2025-03-22 00:00", "2025-04-07 00:00",
     ["2025-03-23 02:00", "2025-03-30 01:00", "2025-04-06 01:00"]),
    ("london-spring-monthly", "30 2 1 * *", LONDON, "2025-02-15 00:00", "2025-04-15 00:00",
     ["2025-03-01 02:30", "2025-04-01 01:30"]),
    ("london-change-day-monthly", "30 1 30 3 *", LONDON, "2024-01-01 00:00", "2026-12-31 00:00",
     ["2024-03-30 01:30", "2025-03-30 01:00", "2026-03-30 00:30"]),
    # --- London, fall back 2025-10-26: 02:00 BST -> 01:00 GMT (01:00Z) ---
    ("london-fall-0130", "30 1 * * *", LONDON, "2025-10-25 00:00", "2025-10-27 12:00",
     ["2025-10-25 00:30", "2025-10-26 00:30", "2025-10-27 01:30"]),
    ("london-fall-0230", "30 2 * * *", LONDON, "2025-10-25 00:00", "2025-10-27 12:00",
     ["2025-10-25 01:30", "2025-10-26 02:30", "2025-10-27 02:30"]),
    ("london-fall-0000", "0 0 * * *", LONDON, "2025-10-24 12:00", "2025-10-27 12:00",
     ["2025-10-24 23:00", "2025-10-25 23:00", "2025-10-27 00:00"]),
    # 00:00 BST, 01:00 BST, 01:00 GMT, 02:00 GMT
    ("london-fall-hourly", "0 * * * *", LONDON, "2025-10-25 23:00", "2025-10-26 02:00",
     ["2025-10-25 23:00", "2025-10-26 00:00", "2025-10-26 01:00", "2025-10-26 02:00"]),
    ("london-fall-15min", "*/15 * * * *", LONDON, "2025-10-26 00:00", "2025-10-26 01:00",
     ["2025-10-26 00:00", "2025-10-26 00:15", "2025-10-26 00:30", "2025-10-26 00:45",
      "2025-10-26 01:00"]),
    ("london-fall-weekly", "0 2 * * 0", LONDON, "2025-10-18 00:00", "2025-11-03 00:00",
     ["2025-10-19 01:00", "2025-10-26 02:00", "2025-11-02 02:00"]),
    # --- Lord Howe, fall back 2025-04-06: 02:00 +11 -> 01:30 +10:30 (04-05 15:00Z) ---
    ("lordhowe-fall-0130", "30 1 * * *", LORD_HOWE, "2025-04-04 00:00", "2025-04-06 23:59",
     ["2025-04-04 14:30", "2025-04-05 14:30", "2025-04-06 15:00"]),
    ("lordhowe-fall-0145", "45 1 * * *", LORD_HOWE, "2025-04-04 00:00", "2025-04-06 23:59",
     ["2025-04-04 14:45", "2025-04-05 14:45", "2025-04-06 15:15"]),
    ("lordhowe-fall-0230", "30 2 * * *", LORD_HOWE, "2025-04-04 00:00", "2025-04-06 23:59",
     ["2025-04-04 15:30", "2025-04-05 16:00", "2025-04-06 16:00"]),
    ("lordhowe-fall-0000", "0 0 * * *", LORD_HOWE, "2025-04-04 00:00", "2025-04-06 23:59",
     ["2025-04-04 13:00", "2025-04-05 13:00", "2025-04-06 13:30"]),
    # 00:00 +11, 01:00 +11, 02:00 +10:30, 03:00 +10:30: no hour mark is repeated
    ("lordhowe-fall-hourly", "0 * * * *", LORD_HOWE, "2025-04-05 13:00", "2025-04-05 16:30",
     ["2025-04-05 13:00", "2025-04-05 14:00", "2025-04-05 15:30", "2025-04-05 16:30"]),
    # 01:15, 01:30, 01:45 at +11, then 01:30, 01:45 again at +10:30, then 02:00
    ("lordhowe-fall-15min", "*/15 * * * *", LORD_HOWE, "2025-04-05 14:15", "2025-04-05 15:30",
     ["2025-04-05 14:15", "2025-04-05 14:30", "2025-04-05 14:45", "2025-04-05 15:00",
      "2025-04-05 15:15", "2025-04-05 15:30"]),
    ("lordhowe-fall-weekly", "0 2 * * 0", LORD_HOWE, "2025-03-29 00:00", "2025-04-12 23:59",
     ["2025-03-29 15:00", "2025-04-05 15:30", "2025-04-12 15:30"]),
    ("lordhowe-fall-monthly", "30 2 1 * *", LORD_HOWE, "2025-03-15 00:00", "2025-05-15 00:00",
     ["2025-03-31 15:30", "2025-04-30 16:00"]),
    # April 6th 01:45: +11 in 2024 (change on the 7th), first of two in 2025, +10:30 in 2026
    ("lordhowe-fall-change-day", "45 1 6 4 *", LORD_HOWE, "2024-01-01 00:00", "2026-12-31 00:00",
     ["2024-04-05 14:45", "2025-04-05 14:45", "2026-04-05 15:15"]),
    # --- Lord Howe, spring forward 2025-10-05: 02:00 +10:30 -> 02:30 +11 (10-04 15:30Z) ---
    ("lordhowe-spring-0215", "15 2 * * *", LORD_HOWE, "2025-10-03 00:00", "2025-10-05 23:59",
     ["2025-10-03 15:45", "2025-10-04 15:30", "2025-10-05 15:15"]),
    ("lordhowe-spring-0230", "30 2 * * *", LORD_HOWE, "2025-10-03 00:00", "2025-10-05 23:59",
     ["2025-10-03 16:00", "2025-10-04 15:30", "2025-10-05 15:30"]),
    ("lordhowe-spring-0130", "30 1 * * *", LORD_HOWE, "2025-10-03 00:00", "2025-10-05 23:59",
     ["2025-10-03 15:00", "2025-10-04 15:00", "2025-10-05 14:30"]),
    ("lordhowe-spring-0000", "0 0 * * *", LORD_HOWE, "2025-10-03 00:00", "2025-10-05 23:59",
     ["2025-10-03 13:30", "2025-10-04 13:30", "2025-10-05 13:00"]),
    # 00:00 +10:30, 01:00 +10:30, (02:00 skipped), 03:00 +11
    ("lordhowe-spring-hourly", "0 * * * *", LORD_HOWE, "2025-10-04 13:30", "2025-10-04 16:00",
     ["2025-10-04 13:30", "2025-10-04 14:30", "2025-10-04 16:00"]),
    # 01:30, 01:45 at +10:30, (02:00, 02:15 skipped), 02:30, 02:45 at +11
    ("lordhowe-spring-15min", "*/15 * * * *", LORD_HOWE, "2025-10-04 15:00", "2025-10-04 15:45",
     ["2025-10-04 15:00", "2025-10-04 15:15", "2025-10-04 15:30", "2025-10-04 15:45"]),
    ("lordhowe-spring-weekly", "0 2 * * 0", LORD_HOWE, "2025-09-27 00:00", "2025-10-12 00:00",
     ["2025-09-27 15:30", "2025-10-04 15:30", "2025-10-11 15:00"]),
    ("lordhowe-spring-monthly", "30 2 1 * *", LORD_HOWE, "2025-09-15 00:00", "2025-11-15 00:00",
     ["2025-09-30 16:00", "2025-10-31 15:30"]),
    # October 5th 02:15: +10:30 in 2024 (change on the 6th), skipped in 2025, +11 in 2026
    ("lordhowe-spring-change-day", "15 2 5 10 *", LORD_HOWE, "2024-01-01 00:00",
     "2026-12-31 00:00", ["2024-10-04 15:45", "2025-10-04 15:30", "2026-10-04 15:15"]),
    ("lordhowe-spring-merged", "0,15 2 * * *", LORD_HOWE, "2025-10-03 00:00", "2025-10-05 23:59",
     ["2025-10-03 15:30", "2025-10-03 15:45", "2025-10-04 15:30", "2025-10-05 15:00",
      "2025-10-05 15:15"]),
    # --- Dhaka, +06:00 all year: nothing moves ---
    ("dhaka-0230", "30 2 * * *", DHAKA, "2025-03-07 12:00", "2025-03-09 23:59",
     ["2025-03-07 20:30", "2025-03-08 20:30", "2025-03-09 20:30"]),
    ("dhaka-0130", "30 1 * * *", DHAKA, "2025-03-07 12:00", "2025-03-09 23:59",
     ["2025-03-07 19:30", "2025-03-08 19:30", "2025-03-09 19:30"]),
    ("dhaka-0000", "0 0 * * *", DHAKA, "2025-03-07 12:00", "2025-03-09 23:59",
     ["2025-03-07 18:00", "2025-03-08 18:00", "2025-03-09 18:00"]),
    ("dhaka-hourly", "0 * * * *", DHAKA, "2025-11-01 19:00", "2025-11-01 22:00",
     ["2025-11-01 19:00", "2025-11-01 20:00", "2025-11-01 21:00", "2025-11-01 22:00"]),
    ("dhaka-15min", "*/15 * * * *", DHAKA, "2025-11-01 19:00", "2025-11-01 19:45",
     ["2025-11-01 19:00", "2025-11-01 19:15", "2025-11-01 19:30", "2025-11-01 19:45"]),
    ("dhaka-weekly", "0 2 * * 0", DHAKA, "2025-03-01 00:00", "2025-03-17 00:00",
     ["2025-03-01 20:00", "2025-03-08 20:00", "2025-03-15 20:00"]),
    ("dhaka-monthly", "30 2 1 * *", DHAKA, "2025-02-15 00:00", "2025-04-15 00:00",
     ["2025-02-28 20:30", "2025-03-31 20:30"]),
    ("dhaka-change-day-monthly", "30 2 9 3 *", DHAKA, "2024-01-01 00:00", "2026-12-31 00:00",
     ["2024-03-08 20:30", "2025-03-08 20:30", "2026-03-08 20:30"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("schedule", "zone", "first", "last", "expected"),
    [case[1:] for case in DST_CASES],
    ids=[case[0] for case in DST_CASES],
)
def test_logical_dates_across_dst(schedule, zone, first, last, expected):
    got = logical_dates(schedule, zone, first, last)
    assert got == [u(text) for text in expected]
    assert len(set(got)) == len(got)
    assert all(value.tzinfo is UTC for value in got)


# (zone, schedule, first and last instant of the local day in UTC, expected runs that day)
DAY_COUNTS = [
    (NY, "0 * * * *", "2025-03-09 05:00", "2025-03-10 03:59", 23),
    (NY, "*/15 * * * *", "2025-03-09 05:00", "2025-03-10 03:59", 92),
    (NY, "0 * * * *", "2025-11-02 04:00", "2025-11-03 04:59", 25),
    (NY, "*/15 * * * *", "2025-11-02 04:00", "2025-11-03 04:59", 100),
    (NY, "0 * * * *", "2025-03-10 04:00", "2025-03-11 03:59", 24),
    (LONDON, "0 * * * *", "2025-03-30 00:00", "2025-03-30 22:59", 23),
    (LONDON, "*/15 * * * *", "2025-10-25 23:00", "2025-10-26 23:59", 100),
    # Lord Howe's day is 23.5 h in spring (02:00 is skipped, 02:30 is not) and 24.5 h in autumn
    # (01:30 and 01:45 repeat, no hour mark does)
    (LORD_HOWE, "0 * * * *", "2025-10-04 13:30", "2025-10-05 12:59", 23),
    (LORD_HOWE, "*/15 * * * *", "2025-10-04 13:30", "2025-10-05 12:59", 94),
    (LORD_HOWE, "0 * * * *", "2025-04-05 13:00", "2025-04-06 13:29", 24),
    (LORD_HOWE, "*/15 * * * *", "2025-04-05 13:00", "2025-04-06 13:29", 98),
    (DHAKA, "0 * * * *", "2025-03-08 18:00", "2025-03-09 17:59", 24),
    (DHAKA, "*/15 * * * *", "2025-03-08 18:00", "2025-03-09 17:59", 96),
]


@pytest.mark.parametrize(("zone", "schedule", "first", "last", "count"), DAY_COUNTS)
def test_real_time_runs_on_change_days(zone, schedule, first, last, count):
    got = logical_dates(schedule, zone, first, last)
    assert len(got) == count
    assert len(set(got)) == count


@pytest.mark.parametrize("zone", [NY, LONDON, LORD_HOWE, DHAKA, "UTC", "Pacific/Apia"])
@pytest.mark.parametrize(
    "schedule", ["30 1 * * *", "30 2 * * *", "0 * * * *", "*/15 * * * *", "0,30 1-3 * * *"]
)
def test_intervals_chain_without_gap_or_duplicate_for_a_year(zone, schedule):
    timetable = make_timetable(schedule, zone, start_date="2024-12-31")
    found = list(timetable.intervals(u("2025-01-01 00:00"), u("2025-12-31 23:59")))
    assert len(found) > 300
    for earlier, later in pairwise(found):
        assert earlier.start < earlier.end == later.start


def test_fixed_time_and_real_time_are_told_apart_by_hour_and_minute_fields():
    kinds = {
        expr: make_timetable(expr, NY, start_date="2025-01-01").fixed_time
        for expr in ["30 2 * * *", "0 1-3 * * 1-5", "@daily", "0 * * * *", "*/5 2 * * *",
                     "0 1-3/1 * * *", "@hourly"]
    }  # fmt: skip
    assert kinds == {
        "30 2 * * *": True,
        "0 1-3 * * 1-5": True,
        "@daily": True,
        "0 * * * *": False,
        "*/5 2 * * *": False,
        "0 1-3/1 * * *": False,
        "@hourly": False,
    }


# --- occurrences and their DST notes -------------------------------------------------------------

MOVED_0230 = "moved: 02:30 skipped by DST, fires at 03:00 EDT"
MERGED_NY = "merged: 02:00, 02:30 skipped by DST, fire once at 03:00 EDT"
OCCURRENCE_CASES = [
    ("moved", "30 2 * * *", NY, "2025-03-07 12:00",
     [("2025-03-08 07:30", None), ("2025-03-09 07:00", MOVED_0230), ("2025-03-10 06:30", None)]),
    ("repeated-fixed", "30 1 * * *", NY, "2025-10-31 12:00",
     [("2025-11-01 05:30", None),
      ("2025-11-02 05:30", "repeated 01:30 fires once (first occurrence)"),
      ("2025-11-03 06:30", None)]),
    ("repeated-real-time", "0 * * * *", NY, "2025-11-02 03:30",
     [("2025-11-02 04:00", None), ("2025-11-02 05:00", "real time: 1st 01:00 (EDT)"),
      ("2025-11-02 06:00", "real time: 2nd 01:00 (EST)"), ("2025-11-02 07:00", None)]),
    ("merged", "0,30 2 * * *", NY, "2025-03-08 12:00",
     [("2025-03-09 07:00", MERGED_NY), ("2025-03-10 06:00", None), ("2025-03-10 06:30", None)]),
    ("merged-with-existing", "0 2,3 * * *", NY, "2025-03-08 12:00",
     [("2025-03-09 07:00", "merged: 02:00 skipped by DST, fires once together with 03:00 EDT"),
      ("2025-03-10 06:00", None)]),
    ("lordhowe-moved", "15 2 * * *", LORD_HOWE, "2025-10-04 00:00",
     [("2025-10-04 15:30", "moved: 02:15 skipped by DST, fires at 02:30 +11"),
      ("2025-10-05 15:15", None)]),
    ("real-time-gap-has-no-note", "0 * * * *", NY, "2025-03-09 05:30",
     [("2025-03-09 06:00", None), ("2025-03-09 07:00", None)]),
    ("no-change", "30 2 * * *", DHAKA, "2025-03-07 12:00",
     [("2025-03-07 20:30", None), ("2025-03-08 20:30", None)]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("schedule", "zone", "after", "expected"),
    [case[1:] for case in OCCURRENCE_CASES],
    ids=[case[0] for case in OCCURRENCE_CASES],
)
def test_occurrences_carry_dst_notes_exactly_where_dst_acted(schedule, zone, after, expected):
    timetable = make_timetable(schedule, zone, start_date="2024-01-01")
    got = timetable.occurrences(u(after), len(expected))
    assert [(o.interval.start, o.dst_note) for o in got] == [(u(t), n) for t, n in expected]


def test_occurrences_intervals_run_to_the_next_fire_and_start_strictly_after():
    timetable = make_timetable("30 2 * * *", NY, start_date="2024-01-01")
    got = timetable.occurrences(u("2025-03-08 07:30"), 2)
    assert [o.interval for o in got] == [
        DataInterval(u("2025-03-09 07:00"), u("2025-03-10 06:30")),
        DataInterval(u("2025-03-10 06:30"), u("2025-03-11 06:30")),
    ]


def test_repeated_hour_that_already_began_still_gets_its_second_occurrence():
    # after 01:50 EDT: the 01:xx EST quarter-hours are still to come, in real time
    timetable = make_timetable("*/15 * * * *", NY, start_date="2024-01-01")
    got = [o.interval.start for o in timetable.occurrences(u("2025-11-02 05:50"), 5)]
    assert got == [u(f"2025-11-02 06:{m}") for m in ("00", "15", "30", "45")] + [
        u("2025-11-02 07:00")
    ]


def test_fixed_time_repeat_does_not_fire_again_after_its_first_occurrence():
    timetable = make_timetable("30 1 * * *", NY, start_date="2024-01-01")
    assert timetable.next_interval(u("2025-11-02 05:30")).start == u("2025-11-03 06:30")


# --- presets, @once, timedelta, None ------------------------------------------------------------


@pytest.mark.parametrize(
    ("preset", "first", "second"),
    [
        ("@hourly", "2026-01-01 00:00", "2026-01-01 01:00"),
        ("@daily", "2026-01-01 00:00", "2026-01-02 00:00"),
        ("@weekly", "2026-01-04 00:00", "2026-01-11 00:00"),  # 2026-01-01 is a Thursday
        ("@monthly", "2026-01-01 00:00", "2026-02-01 00:00"),
        ("@yearly", "2026-01-01 00:00", "2027-01-01 00:00"),
        ("@annually", "2026-01-01 00:00", "2027-01-01 00:00"),
        ("@DAILY", "2026-01-01 00:00", "2026-01-02 00:00"),
    ],
)
def test_presets(preset, first, second):
    timetable = make_timetable(preset, "UTC", start_date="2026-01-01")
    assert isinstance(timetable, CronTimetable)
    assert timetable.description == preset
    assert timetable.next_interval(None) == DataInterval(u(first), u(second))


def test_daily_first_run_matches_the_design_example():
    timetable = make_timetable("@daily", "UTC", start_date="2026-01-01")
    assert timetable.next_interval(None) == DataInterval(u("2026-01-01"), u("2026-01-02"))
    assert timetable.due_intervals(None, u("2026-01-01 23:59:59.999999"), True) == []
    assert len(timetable.due_intervals(None, u("2026-01-02 00:00"), True)) == 1


def test_once_is_a_single_interval_at_start_date():
    timetable = make_timetable("@once", "Asia/Dhaka", start_date="2026-01-01T06:00")
    only = DataInterval(u("2026-01-01 00:00"), u("2026-01-01 00:00"))
    assert isinstance(timetable, OnceTimetable)
    assert timetable.description == "@once"
    assert timetable.next_interval(None) == only
    assert timetable.next_interval(u("2025-12-31 23:59")) == only
    assert timetable.next_interval(only.start) is None
    assert timetable.due_intervals(None, u("2025-12-31 23:59"), True) == []
    assert timetable.due_intervals(None, u("2026-06-01 00:00"), True) == [only]
    assert timetable.due_intervals(None, u("2026-06-01 00:00"), False) == [only]
    assert timetable.logical_date_on_day(date(2026, 1, 1)) == only.start


def test_timedelta_intervals_are_real_durations_from_start_date():
    # 12 h steps straight through New York's spring-forward: UTC arithmetic, no DST shift
    timetable = make_timetable(timedelta(hours=12), NY, start_date="2025-03-08T07:00")
    assert isinstance(timetable, DeltaTimetable)
    assert timetable.description == "every 12:00:00"
    got = list(timetable.intervals(u("2025-03-08 00:00"), u("2025-03-09 12:00")))
    assert got == [
        DataInterval(u("2025-03-08 12:00"), u("2025-03-09 00:00")),
        DataInterval(u("2025-03-09 00:00"), u("2025-03-09 12:00")),
        DataInterval(u("2025-03-09 12:00"), u("2025-03-10 00:00")),
    ]
    assert timetable.next_interval(u("2025-03-09 00:00")).start == u("2025-03-09 12:00")
    assert timetable.next_interval(u("2025-03-08 23:59")).start == u("2025-03-09 00:00")


def test_timedelta_description_matches_the_documented_form():
    timetable = make_timetable(timedelta(minutes=30), "UTC", start_date="2026-01-01")
    assert timetable.description == "every 0:30:00"


def test_schedule_none_is_manual_only():
    timetable = make_timetable(None, DHAKA, start_date="2026-01-01")
    assert isinstance(timetable, NullTimetable)
    assert timetable.schedulable is False
    assert timetable.description == "None (manual only)"
    assert timetable.start == u("2025-12-31 18:00")
    assert timetable.next_interval(None) is None
    assert timetable.due_intervals(None, u("2027-01-01 00:00"), True) == []
    assert timetable.due_intervals(None, u("2027-01-01 00:00"), False) == []
    assert timetable.occurrences(u("2026-01-01 00:00"), 3) == []
    assert timetable.logical_date_on_day(date(2026, 1, 2)) is None
    assert make_timetable(None).start is None


def test_scheduled_timetables_are_schedulable():
    kinds = [make_timetable(s, start_date="2026-01-01") for s in ("@daily", "@once")]
    kinds.append(make_timetable(timedelta(hours=1), start_date="2026-01-01"))
    assert all(isinstance(t, Timetable) and t.schedulable for t in kinds)


# --- catchup, bounds and alignment --------------------------------------------------------------


def test_catchup_true_creates_every_missed_interval_oldest_first():
    timetable = make_timetable("@daily", "UTC", start_date="2026-01-01")
    due = timetable.due_intervals(None, u("2026-01-31 05:00"), catchup=True)
    assert len(due) == 30
    assert due[0] == DataInterval(u("2026-01-01"), u("2026-01-02"))
    assert due[-1] == DataInterval(u("2026-01-30"), u("2026-01-31"))


def test_catchup_false_creates_only_the_latest_complete_interval():
    timetable = make_timetable("@daily", "UTC", start_date="2026-01-01")
    due = timetable.due_intervals(None, u("2026-01-31 05:00"), catchup=False)
    assert due == [DataInterval(u("2026-01-30"), u("2026-01-31"))]


@pytest.mark.parametrize(
    ("cursor", "catchup", "expected"),
    [
        ("2026-01-10 00:00", True, [f"2026-01-{d:02}" for d in range(10, 31)]),
        ("2026-01-09 12:00", True, [f"2026-01-{d:02}" for d in range(10, 31)]),
        ("2026-01-30 00:00", True, ["2026-01-30"]),
        ("2026-01-30 00:00", False, ["2026-01-30"]),
        ("2026-01-30 00:00:00.000001", False, []),
        ("2026-01-31 00:00", True, []),
        ("2026-02-05 00:00", False, []),
    ],
)
def test_due_intervals_start_at_the_cursor(cursor, catchup, expected):
    timetable = make_timetable("@daily", "UTC", start_date="2026-01-01")
    due = timetable.due_intervals(u(cursor), u("2026-01-31 05:00"), catchup)
    assert [interval.start for interval in due] == [u(text) for text in expected]


def test_interval_is_due_exactly_at_its_end():
    timetable = make_timetable("0 * * * *", "UTC", start_date="2026-01-01")
    end = u("2026-01-01 01:00")
    assert timetable.due_intervals(None, end - timedelta(microseconds=1), True) == []
    assert timetable.due_intervals(None, end, True) == [DataInterval(u("2026-01-01"), end)]


def test_catchup_false_stays_cheap_for_a_dag_started_long_ago():
    timetable = make_timetable("* * * * *", "UTC", start_date="2000-01-01")
    started = clock.perf_counter()
    due = timetable.due_intervals(None, u("2026-03-01 10:00:30"), catchup=False)
    assert clock.perf_counter() - started < 0.5  # 13 million minutes must not be walked
    assert due == [DataInterval(u("2026-03-01 09:59"), u("2026-03-01 10:00"))]


def test_catchup_false_finds_a_sparse_schedule_far_back():
    timetable = make_timetable("@yearly", "UTC", start_date="2020-01-01")
    due = timetable.due_intervals(None, u("2026-06-01 00:00"), catchup=False)
    assert due == [DataInterval(u("2025-01-01"), u("2026-01-01"))]


def test_end_date_bounds_logical_dates_inclusively():
    timetable = make_timetable("@daily", "UTC", start_date="2026-01-01", end_date="2026-01-05")
    got = list(timetable.intervals(u("2025-12-01 00:00"), u("2026-12-31 00:00")))
    assert [i.start for i in got] == [u(f"2026-01-0{d}") for d in range(1, 6)]
    assert got[-1].end == u("2026-01-06")  # the last run still covers its whole day
    assert timetable.next_interval(u("2026-01-05 00:00")) is None
    due = timetable.due_intervals(None, u("2026-03-01 00:00"), catchup=True)
    assert len(due) == 5
    assert timetable.due_intervals(None, u("2026-03-01"), False)[0].start == u("2026-01-05")


def test_intervals_stay_within_start_date():
    timetable = make_timetable("@daily", "UTC", start_date="2026-01-03")
    got = list(timetable.intervals(u("2026-01-01 00:00"), u("2026-01-04 00:00")))
    assert [i.start for i in got] == [u("2026-01-03"), u("2026-01-04")]


@pytest.mark.parametrize(
    ("schedule", "zone", "start_date", "first"),
    [
        ("30 0 * * *", "UTC", "2026-01-01T12:00", "2026-01-02 00:30"),
        ("30 0 * * *", "UTC", "2026-01-01T00:30", "2026-01-01 00:30"),  # on a fire time
        ("30 0 * * *", "UTC", "2026-01-01T00:30:00.000001", "2026-01-02 00:30"),
        # naive start dates are wall time in the DAG's zone
        ("30 0 * * *", DHAKA, "2026-01-01", "2025-12-31 18:30"),
        ("30 0 * * *", DHAKA, datetime(2026, 1, 1, 1, 0), "2026-01-01 18:30"),
        ("30 0 * * *", DHAKA, date(2026, 1, 1), "2025-12-31 18:30"),
        # an aware start date is taken as given
        ("30 0 * * *", DHAKA, "2026-01-01T00:00+00:00", "2026-01-01 18:30"),
        ("0 * * * *", NY, "2025-03-09T02:30", "2025-03-09 07:00"),  # start in the gap
    ],
)
def test_first_logical_date_is_first_fire_at_or_after_start_date(schedule, zone, start_date, first):
    timetable = make_timetable(schedule, zone, start_date=start_date)
    assert timetable.next_interval(None).start == u(first)


def test_next_interval_is_strictly_after():
    timetable = make_timetable("@daily", "UTC", start_date="2026-01-01")
    fire = u("2026-01-02 00:00")
    assert timetable.next_interval(fire).start == u("2026-01-03")
    assert timetable.next_interval(fire - timedelta(microseconds=1)).start == fire
    assert timetable.next_interval(u("2025-06-01")).start == u("2026-01-01")


def test_naive_instants_are_read_as_utc():
    timetable = make_timetable("@daily", NY, start_date="2026-01-01")
    naive = timetable.next_interval(datetime(2026, 1, 5, 5, 0))
    assert naive == timetable.next_interval(u("2026-01-05 05:00"))
    assert naive.start == u("2026-01-06 05:00")


# --- logical_date_on_day ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schedule", "zone", "day", "expected"),
    [
        ("30 2 * * *", NY, date(2025, 3, 9), "2025-03-09 07:00"),
        ("30 2 * * *", NY, date(2025, 3, 10), "2025-03-10 06:30"),
        ("0 * * * *", NY, date(2025, 11, 2), "2025-11-02 04:00"),
        ("30 0 * * *", DHAKA, date(2026, 1, 1), "2025-12-31 18:30"),
        ("0 2 * * 0", NY, date(2025, 3, 10), None),  # a Monday
        ("30 2 * * *", NY, date(2023, 6, 1), None),  # before start_date
        ("15 2 * * *", LORD_HOWE, date(2025, 10, 5), "2025-10-04 15:30"),
    ],
)
def test_logical_date_on_day(schedule, zone, day, expected):
    timetable = make_timetable(schedule, zone, start_date="2024-01-01")
    got = timetable.logical_date_on_day(day)
    assert got == (u(expected) if expected else None)


# --- command-line dates -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("start", "end", "zone", "first", "last"),
    [
        # a date-only end includes its whole local day
        ("2026-01-05", "2026-01-06", DHAKA, "2026-01-04 18:00", "2026-01-06 17:59:59.999999"),
        ("2026-01-05", "2026-01-05", "UTC", "2026-01-05 00:00", "2026-01-05 23:59:59.999999"),
        # New York's 23-hour day
        ("2025-03-09", "2025-03-09", NY, "2025-03-09 05:00", "2025-03-10 03:59:59.999999"),
        # offsets are taken as given; naive datetimes are local
        ("2026-01-05T10:00+02:00", "2026-01-06T00:00Z", DHAKA, "2026-01-05 08:00",
         "2026-01-06 00:00"),
        ("2026-01-05T10:00", "2026-01-05T10:00", DHAKA, "2026-01-05 04:00", "2026-01-05 04:00"),
    ],
)  # fmt: skip
def test_parse_cli_range(start, end, zone, first, last):
    assert parse_cli_range(start, end, ZoneInfo(zone)) == (u(first), u(last))


def test_parse_cli_range_rejects_end_before_start():
    with pytest.raises(ScheduleError, match=r"^end 2026-01-01 is before start 2026-02-01$"):
        parse_cli_range("2026-02-01", "2026-01-01", ZoneInfo("UTC"))


@pytest.mark.parametrize(
    ("start", "end", "bad"), [("yesterday", "2026-01-01", "yesterday"), ("2026-01-01", "x", "x")]
)
def test_parse_cli_range_rejects_bad_dates(start, end, bad):
    with pytest.raises(ScheduleError, match=f"'{bad}'") as caught:
        parse_cli_range(start, end, ZoneInfo("UTC"))
    assert caught.value.value == bad


@pytest.mark.parametrize(
    ("value", "zone", "expected"),
    [
        ("2026-01-05", DHAKA, "2026-01-04 18:00"),
        ("2025-11-02T01:30", NY, "2025-11-02 05:30"),  # ambiguous: first occurrence
        ("2026-01-05T03:00+01:00", DHAKA, "2026-01-05 02:00"),
    ],
)
def test_parse_cli_instant(value, zone, expected):
    assert parse_cli_instant(value, ZoneInfo(zone)) == u(expected)


# --- to_utc, zones, durations -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "zone", "expected"),
    [
        (date(2026, 1, 1), DHAKA, "2025-12-31 18:00"),
        (datetime(2026, 1, 1, 12, 0), DHAKA, "2026-01-01 06:00"),
        (datetime(2026, 1, 1, 12, 0, tzinfo=ZoneInfo(NY)), DHAKA, "2026-01-01 17:00"),
        ("2026-01-01T12:00Z", DHAKA, "2026-01-01 12:00"),
        ("2026-01-01 12:00:00+05:30", "UTC", "2026-01-01 06:30"),
        # in the spring-forward gap: the first instant after it (the transition itself)
        ("2025-03-09T02:30", NY, "2025-03-09 07:00"),
        ("2025-10-05T02:00", LORD_HOWE, "2025-10-04 15:30"),
        # repeated by fall-back: the first occurrence
        ("2025-11-02T01:30", NY, "2025-11-02 05:30"),
        ("2025-04-06T01:45", LORD_HOWE, "2025-04-05 14:45"),
    ],
)
def test_to_utc(value, zone, expected):
    got = to_utc(value, ZoneInfo(zone))
    assert got == u(expected)
    assert got.tzinfo is UTC


def test_get_zone():
    assert get_zone(LORD_HOWE) == ZoneInfo(LORD_HOWE)
    with pytest.raises(ScheduleError, match=r"^unknown timezone 'Mars/Olympus'$") as caught:
        get_zone("Mars/Olympus")
    assert caught.value.value == "Mars/Olympus"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("10m", timedelta(minutes=10)),
        ("30s", timedelta(seconds=30)),
        ("2h", timedelta(hours=2)),
        ("1d", timedelta(days=1)),
        ("90", timedelta(seconds=90)),
        (90, timedelta(seconds=90)),
        (2.5, timedelta(seconds=2.5)),
        ("1h30m", timedelta(minutes=90)),
        (timedelta(minutes=3), timedelta(minutes=3)),
        (0, timedelta(0)),
    ],
)
def test_parse_duration(value, expected):
    assert parse_duration(value) == expected


@pytest.mark.parametrize("value", ["", "abc", "10x", "-5", -5, True, None, float("nan"), "m10"])
def test_parse_duration_rejects(value):
    with pytest.raises(ScheduleError, match=rf"invalid duration '{value}'"):
        parse_duration(value)


# --- errors -------------------------------------------------------------------------------------

GOOD_START = {"start_date": "2026-01-01"}
ERROR_CASES = [
    ("cron-range", ("61 * * * *",), GOOD_START,
     r"^invalid cron expression '61 \* \* \* \*': bad minute field '61'"),
    ("cron-hour", ("0 24 * * *",), GOOD_START,
     r"^invalid cron expression '0 24 \* \* \*': bad hour field '24'"),
    ("cron-fields", ("0 0 * *",), GOOD_START,
     r"^invalid cron expression '0 0 \* \*': expected 5 fields"),
    ("cron-seconds-field", ("0 0 * * * *",), GOOD_START,
     r"^invalid cron expression '0 0 \* \* \* \*': expected 5 fields"),
    ("cron-never", ("0 0 30 2 *",), GOOD_START,
     r"^invalid cron expression '0 0 30 2 \*': .*never fires"),
    ("cron-word", ("every day",), GOOD_START, r"^invalid cron expression 'every day'"),
    ("cron-preset", ("@reboot",), GOOD_START, r"^invalid cron expression '@reboot': unknown"),
    ("cron-step", ("*/0 * * * *",), GOOD_START, r"^invalid cron expression '\*/0 \* \* \* \*'"),
    ("timezone", ("@daily", "Mars/Olympus"), GOOD_START, r"^unknown timezone 'Mars/Olympus'$"),
    ("start", ("@daily",), {"start_date": "yesterday"}, r"^invalid start_date 'yesterday'"),
    ("end", ("@daily",), {"start_date": "2026-01-01", "end_date": "soon"},
     r"^invalid end_date 'soon'"),
    ("end-before-start", ("@daily",), {"start_date": "2026-02-01", "end_date": "2026-01-01"},
     r"^end_date '2026-01-01' is before start_date '2026-02-01'$"),
    ("zero-delta", (timedelta(0),), GOOD_START, r"^invalid schedule timedelta '0:00:00'"),
    ("negative-delta", (timedelta(hours=-1),), GOOD_START,
     r"^invalid schedule timedelta '-1 day, 23:00:00'"),
    ("missing-start-cron", ("@daily",), {}, r"^start_date is required for a scheduled DAG$"),
    ("missing-start-once", ("@once",), {}, r"^start_date is required for a scheduled DAG$"),
    ("missing-start-delta", (timedelta(hours=1),), {},
     r"^start_date is required for a scheduled DAG$"),
    ("schedule-type", (42,), GOOD_START, r"^invalid schedule 42"),
    ("bad-cron-wins-over-missing-start", ("61 * * * *",), {},
     r"^invalid cron expression '61 \* \* \* \*'"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [case[1:] for case in ERROR_CASES],
    ids=[case[0] for case in ERROR_CASES],
)
def test_make_timetable_errors_name_the_value(args, kwargs, message):
    with pytest.raises(ScheduleError, match=message) as caught:
        make_timetable(*args, **kwargs)
    assert isinstance(caught.value, UsageError) and isinstance(caught.value, ValueError)
    assert "\n" not in str(caught.value)


def test_cron_error_carries_the_expression():
    with pytest.raises(ScheduleError) as caught:
        make_timetable("61 * * * *", start_date="2026-01-01")
    assert caught.value.value == "61 * * * *"


# --- spread_offset ------------------------------------------------------------------------------


def test_spread_offset_is_within_the_window_and_varies_by_dag():
    window = timedelta(minutes=10)
    offsets = [spread_offset(f"dag_{i}", window) for i in range(200)]
    assert all(timedelta(0) <= offset < window for offset in offsets)
    assert len(set(offsets)) > 100
    assert spread_offset("nightly_sales", "10m") == spread_offset("nightly_sales", window)
    assert spread_offset("nightly_sales", timedelta(0)) == timedelta(0)
    tiny = spread_offset("nightly_sales", timedelta(microseconds=500))
    assert timedelta(0) <= tiny < timedelta(microseconds=500)


def test_spread_offset_is_stable_across_processes():
    code = (
        "from datetime import timedelta; from dagrun.timing.instants import spread_offset; "
        "print(spread_offset('nightly_sales', timedelta(hours=1)).total_seconds())"
    )
    outputs = set()
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(REPO)}
        result = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        outputs.add(result.stdout.strip())
    assert len(outputs) == 1
    assert float(outputs.pop()) == spread_offset("nightly_sales", timedelta(hours=1)).seconds


# --- agreement with croniter and speed ----------------------------------------------------------


@pytest.mark.parametrize(
    "expression",
    [
        "0 0 1,15 * 1-5",  # day-of-month and day-of-week both set: either matches
        "0 12 */2 * *",
        "0 0 * * 5-1",
        "0 0 29 2 *",
        "0 0 31 * *",
        "*/20 1-2 * jan-mar mon",
        "0 0 L * *",
        "0 0 * * 5#2",
        "0 9 15W * *",
        "0 0 * * 7",
    ],
)
def test_day_matching_agrees_with_croniter_in_utc(expression):
    # In UTC wall time and instants coincide, so croniter's naive iteration is an oracle for
    # which days and times an expression names.
    oracle = croniter(expression, datetime(2023, 12, 31, 23, 59), ret_type=datetime)
    expected = [oracle.get_next().replace(tzinfo=UTC) for _ in range(300)]
    timetable = make_timetable(expression, "UTC", start_date="2024-01-01")
    got = [o.interval.start for o in timetable.occurrences(None, 300)]
    assert got == expected


@pytest.mark.parametrize("schedule", ["*/5 * * * *", "30 2 * * *"])
def test_ten_thousand_intervals_are_fast(schedule):
    timetable = make_timetable(schedule, NY, start_date="2000-01-01")
    started = clock.perf_counter()
    got = timetable.occurrences(u("2000-01-01 00:00"), 10_000)
    assert clock.perf_counter() - started < 1.0
    assert len(got) == 10_000


READS_A_STORED_EXPANSION = """
import sys
from datetime import UTC, datetime
from dagrun.timing.timetable import make_timetable

expansion = ((30,), (2,), ("*",), ("*",), (1, 2, 3, 4, 5))
tt = make_timetable("30 2 * * 1-5", "Europe/Berlin", "2026-03-23", None, cron=expansion)
first, last = datetime(2026, 3, 23, tzinfo=UTC), datetime(2026, 4, 4, tzinfo=UTC)
print([str(i.start) for i in tt.intervals(first, last)])
print("croniter" in sys.modules)
"""


def test_a_stored_expansion_gives_the_same_timetable_without_croniter():
    """Processes that read specs (CLI, scheduler) build cron timetables from the parsed
    fields the spec keeps; the fires are the ones croniter's parse gives (a DST change
    falls in this range)."""
    parsed = make_timetable("30 2 * * 1-5", "Europe/Berlin", "2026-03-23")
    assert parsed.expansion == ((30,), (2,), ("*",), ("*",), (1, 2, 3, 4, 5))
    out = subprocess.run(
        [sys.executable, "-c", READS_A_STORED_EXPANSION],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.splitlines()
    first, last = datetime(2026, 3, 23, tzinfo=UTC), datetime(2026, 4, 4, tzinfo=UTC)
    fires = [str(i.start) for i in parsed.intervals(first, last)]
    assert len(fires) == 10 and out[0] == str(fires)
    assert out[1] == "False"


def test_an_expression_only_croniter_can_walk_keeps_no_expansion():
    assert make_timetable("0 12 L * *", "UTC", "2026-01-01").expansion is None

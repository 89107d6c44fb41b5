"""Airflow's timetables (``airflow.timetables.trigger``, ``.interval``) as dagrun's
schedule objects (``dagrun.timing.schedules``): each class is the native one under
Airflow's name and signature, so ``DAG(schedule=CronTriggerTimetable(...))`` and
``AssetOrTimeSchedule(timetable=...)`` take them as they are.

Airflow's ``timezone`` may be an IANA name, a ``zoneinfo`` zone or a pendulum zone (its
``name``); left out (Airflow requires it), the cron is read in the DAG's zone. Its
``interval`` and ``delta`` may be a timedelta or a relativedelta of fixed-length units
(days, hours ...; months and years have no fixed length, and are refused by name).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from dagrun.errors import ScheduleError
from dagrun.timing.schedules import CronIntervals, CronTrigger, DeltaIntervals

_FIXED_UNITS = ("weeks", "days", "hours", "minutes", "seconds", "microseconds")


def zone_name(timezone: Any) -> str | None:
    """An Airflow timezone argument as the IANA name dagrun reads."""
    if timezone is None or isinstance(timezone, str):
        return timezone
    return getattr(timezone, "key", None) or getattr(timezone, "name", None) or str(timezone)


def fixed_delta(value: Any, what: str) -> Any:
    """A relativedelta of fixed-length units as a timedelta; anything else as it is."""
    if type(value).__name__ != "relativedelta":
        return value
    if getattr(value, "years", 0) or getattr(value, "months", 0):
        raise ScheduleError(
            f"{what} {value!r}: months and years are not fixed durations; dagrun takes a "
            "timedelta or a relativedelta of weeks, days, hours, minutes and seconds",
            value=value,
        )
    return timedelta(**{unit: getattr(value, unit, 0) for unit in _FIXED_UNITS})


class CronTriggerTimetable(CronTrigger):
    """A run at each cron fire, its data interval the ``interval`` before it
    (``dagrun.CronTrigger``)."""

    def __init__(
        self,
        cron: str,
        *,
        timezone: Any = None,
        interval: Any = timedelta(0),
        run_immediately: bool | timedelta | None = False,
    ):
        super().__init__(
            cron,
            timezone=zone_name(timezone),
            interval=fixed_delta(interval, "interval"),
            run_immediately=run_immediately,
        )


class CronDataIntervalTimetable(CronIntervals):
    """Intervals from one cron fire to the next, each run due at its end
    (``dagrun.CronIntervals``: what a cron string means)."""

    def __init__(self, cron: str, timezone: Any = None):
        super().__init__(cron, zone_name(timezone))


class DeltaDataIntervalTimetable(DeltaIntervals):
    """Intervals of a fixed duration from the start date (``dagrun.DeltaIntervals``)."""

    def __init__(self, delta: Any):
        super().__init__(fixed_delta(delta, "delta"))

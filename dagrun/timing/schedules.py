"""Time schedules a DAG file can name as objects, beside cron strings, presets and timedeltas.

``DAG(schedule=...)`` takes any of them (``timetable.make_timetable`` builds the timetable):

- ``CronTrigger("0 1 * * *", interval="1h")``: a run at each cron fire time, due then, whose
  data interval is the ``interval`` before it (Airflow's ``CronTriggerTimetable``); its
  logical date is the start of that interval, so the fire time itself with the default
  ``interval`` of 0.
- ``CronIntervals("0 1 * * *")``: what a cron string means (Airflow's
  ``CronDataIntervalTimetable``): intervals from one fire to the next, each due at its end.
- ``DeltaIntervals(timedelta(hours=6))``: what a timedelta means (Airflow's
  ``DeltaDataIntervalTimetable``): intervals of that real duration from start_date.

A cron object's ``timezone`` is the zone its expression is read in; None means the DAG's
``timezone``. Each object validates when made, so a mistake is the DAG file's import error,
and turns into plain data (``to_data``) that the stored spec keeps and ``from_data`` reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from dagrun.errors import ScheduleError
from dagrun.timing.cron import compile_cron
from dagrun.timing.instants import get_zone, parse_duration

#: How a trigger schedule without a start_date decides where to begin: True the latest
#: fire already past, False the next one, a duration the past fire if it is at most that
#: old, None the past fire if within a tenth of the gap to the next (at least 5 minutes).
RunImmediately = bool | timedelta | None


def _zone_name(timezone: Any, what: str) -> str | None:
    """An IANA zone's name (checked now); None leaves the cron in the DAG's zone."""
    if timezone is None:
        return None
    name = getattr(timezone, "key", None) or timezone
    if not isinstance(name, str):
        raise ScheduleError(f"{what}: timezone must be an IANA name, not {timezone!r}", value=name)
    get_zone(name)
    return name


def _cron(cron: Any, what: str) -> str:
    if not isinstance(cron, str) or cron.strip().lower() == "@once":
        raise ScheduleError(f"{what} needs a cron expression or preset, not {cron!r}", value=cron)
    compile_cron(cron.strip())
    return cron.strip()


def _duration(value: Any, what: str) -> timedelta:
    try:
        return parse_duration(value)
    except ScheduleError as exc:
        raise ScheduleError(f"{what}: {exc}", value=value) from None


@dataclass(frozen=True, init=False)
class CronTrigger:
    """A run at each fire time of ``cron``; its data interval is ``(fire - interval, fire)``
    and it is due at the fire. ``run_immediately`` only matters without a start_date (see
    ``RunImmediately``); with one, the first run is the first fire at or after it."""

    cron: str
    timezone: str | None
    interval: timedelta
    run_immediately: RunImmediately

    def __init__(
        self,
        cron: str,
        *,
        timezone: Any = None,
        interval: str | float | timedelta = timedelta(0),
        run_immediately: RunImmediately | str | float = False,
    ):
        what = f"CronTrigger({cron!r})"
        object.__setattr__(self, "cron", _cron(cron, "CronTrigger"))
        object.__setattr__(self, "timezone", _zone_name(timezone, what))
        object.__setattr__(self, "interval", _duration(interval, f"{what} interval"))
        if not (run_immediately is None or isinstance(run_immediately, bool)):
            run_immediately = _duration(run_immediately, f"{what} run_immediately")
        object.__setattr__(self, "run_immediately", run_immediately)

    def to_data(self) -> dict[str, Any]:
        immediately = self.run_immediately
        return {
            "kind": "cron_trigger",
            "cron": self.cron,
            "timezone": self.timezone,
            "interval": self.interval.total_seconds(),
            "run_immediately": (
                immediately.total_seconds() if isinstance(immediately, timedelta) else immediately
            ),
        }


@dataclass(frozen=True, init=False)
class CronIntervals:
    """Intervals from one fire time of ``cron`` to the next, each run due at its end (what a
    cron string means), read in ``timezone`` (None: the DAG's)."""

    cron: str
    timezone: str | None

    def __init__(self, cron: str, timezone: Any = None):
        object.__setattr__(self, "cron", _cron(cron, "CronIntervals"))
        object.__setattr__(self, "timezone", _zone_name(timezone, f"CronIntervals({cron!r})"))

    def to_data(self) -> dict[str, Any]:
        return {"kind": "cron_intervals", "cron": self.cron, "timezone": self.timezone}


@dataclass(frozen=True, init=False)
class DeltaIntervals:
    """Intervals of ``delta`` real time from start_date, each due at its end (what a
    timedelta means)."""

    delta: timedelta

    def __init__(self, delta: str | float | timedelta):
        found = _duration(delta, "DeltaIntervals")
        if found <= timedelta(0):
            raise ScheduleError(f"DeltaIntervals({delta!r}) must be positive", value=delta)
        object.__setattr__(self, "delta", found)

    def to_data(self) -> dict[str, Any]:
        return {"kind": "delta_intervals", "seconds": self.delta.total_seconds()}


Schedule = CronTrigger | CronIntervals | DeltaIntervals
SCHEDULE_TYPES = (CronTrigger, CronIntervals, DeltaIntervals)


def from_data(data: dict[str, Any]) -> Schedule:
    """The schedule object a spec stored with ``to_data``. Stored data was checked when its
    DAG file was parsed, so it is taken as it is: a reader of specs (the scheduler, the
    CLI) never parses a cron expression with croniter (``DagSpec.cron`` holds its fields)."""
    kind = data.get("kind")
    if kind == "cron_trigger":
        immediately = data.get("run_immediately", False)
        if isinstance(immediately, int | float) and not isinstance(immediately, bool):
            immediately = timedelta(seconds=immediately)
        return _stored(
            CronTrigger,
            cron=data["cron"],
            timezone=data.get("timezone"),
            interval=timedelta(seconds=data.get("interval", 0)),
            run_immediately=immediately,
        )
    if kind == "cron_intervals":
        return _stored(CronIntervals, cron=data["cron"], timezone=data.get("timezone"))
    if kind == "delta_intervals":
        return _stored(DeltaIntervals, delta=timedelta(seconds=data["seconds"]))
    raise ScheduleError(f"unknown stored schedule {data!r}", value=data)


def _stored(kind: type[Schedule], **values: Any) -> Any:
    """A schedule object with these fields, unchecked (see ``from_data``)."""
    made = object.__new__(kind)
    for name, value in values.items():
        object.__setattr__(made, name, value)
    return made

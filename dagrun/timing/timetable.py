"""Timetables: when a DAG's runs fall, as pure functions of schedule, timezone and dates.

The contract is DESIGN.md section 3. A run's logical date is the start of its data interval and
the run is due when the interval ends; cron is evaluated in the DAG's timezone and every instant
handed out is aware UTC. Daylight saving follows Debian cron: a fixed-time schedule (no ``*``
or step in the hour and minute fields) fires a wall time skipped by spring-forward once, at the
first instant after the gap, and a wall time repeated by fall-back once, at its first
occurrence; other schedules follow real time (skipped wall times do not fire, repeated ones
fire twice).

croniter parses and validates expressions, and resolves the exotic day syntax (``L``, ``#``,
``W``). Its expansion of a plain expression is kept with the serialised DAG (``DagSpec.cron``),
so a process that only reads specs, as the CLI and the scheduler do, never imports it. We
never let it step through aware datetimes: it fires a daily 01:30 twice on a fall-back night.
Instead we walk naive wall-clock times through the local calendar and map each one to instants
ourselves, which makes the DST rule explicit and testable. Walking the calendar ourselves
(every matching day fires at each of the same times of day) is also several times faster than
one croniter step per fire, which matters for a scheduler that asks on every tick and for
year-long backfill plans.

Instants passed in may be naive; they are then taken as UTC, which is what the store holds.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from itertools import islice, takewhile
from typing import Any, NamedTuple
from zoneinfo import ZoneInfo

from dagrun.errors import ScheduleError
from dagrun.timing import schedules
from dagrun.timing.cron import Expansion, compile_cron
from dagrun.timing.instants import (
    ONE_DAY,
    TICK,
    Kind,
    as_utc,
    get_zone,
    hhmm,
    local_text,
    resolve_reading,
    to_utc,
    wall_to_utc,
)

# Offsets are sampled this far apart to find where a fire time's wall-clock scan must begin;
# no zone changes its offset twice within it.
_OFFSET_HORIZON = timedelta(days=2)


@dataclass(frozen=True)
class DataInterval:
    """The slice of time one run processes; `start` is the run's logical date."""

    start: datetime
    end: datetime


@dataclass(frozen=True)
class Occurrence:
    """An interval as `dagrun dags next` shows it, with a note when DST moved or merged it."""

    interval: DataInterval
    dst_note: str | None


# --- timetables ---------------------------------------------------------------------------------


class Timetable(ABC):
    """When a DAG's runs fall. Subclasses only say which intervals follow an instant.

    Everything else (bounds, catchup, look-ups by day) is built here on `_intervals_after`, so
    the rules for start_date, end_date and catchup are written once for every kind of schedule.
    """

    schedulable: bool = True
    #: How far a run's logical date lies before the instant start_date and end_date bound:
    #: a trigger schedule's ``interval`` (its fire times are bounded, as Airflow bounds
    #: them), zero for the schedules whose logical dates are bounded.
    lead: timedelta = timedelta(0)

    def __init__(
        self, description: str, tz: ZoneInfo, start: datetime | None, end: datetime | None
    ):
        self.description = description
        self.tz = tz
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.description!r} tz={self.tz.key} "
            f"start={self.start} end={self.end}>"
        )

    @abstractmethod
    def _intervals_after(self, after: datetime) -> Iterator[tuple[DataInterval, str | None]]:
        """Intervals with logical date strictly after `after` (UTC), ignoring start and end."""

    def _upcoming(self, after: datetime | None) -> Iterator[tuple[DataInterval, str | None]]:
        """Intervals after `after` (or from start), within start_date and end_date. Without
        a start_date only a trigger schedule has intervals, and only after a given instant."""
        floor = None if self.start is None else self.start - self.lead - TICK
        if after is None:
            if floor is None:
                return
            after = floor
        after = as_utc(after) if floor is None else max(as_utc(after), floor)
        last = None if self.end is None else self.end - self.lead
        for interval, note in self._intervals_after(after):
            if last is not None and interval.start > last:
                return
            yield interval, note

    def next_interval(self, after: datetime | None) -> DataInterval | None:
        """First interval whose logical date is strictly after `after` (or the first one >= start
        when after is None); None when past end_date or for schedule None."""
        for interval, _ in self._upcoming(after):
            return interval
        return None

    def intervals(self, first: datetime, last: datetime) -> Iterator[DataInterval]:
        """Every interval with first <= logical date <= last (and within start/end)."""
        last = as_utc(last)
        for interval, _ in self._upcoming(as_utc(first) - TICK):
            if interval.start > last:
                return
            yield interval

    def due_intervals(
        self, cursor: datetime | None, now: datetime, catchup: bool
    ) -> list[DataInterval]:
        """Intervals whose logical date >= cursor (cursor None = from start) and whose end <= now,
        oldest first. catchup=False returns at most one: the latest complete interval (if it is
        >= cursor)."""
        now = as_utc(now)
        if not self.schedulable:
            return []
        if not catchup:
            latest = self._latest_complete(cursor, now)
            return [latest] if latest is not None else []
        after = None if cursor is None else as_utc(cursor) - TICK
        upcoming = (interval for interval, _ in self._upcoming(after))
        return list(takewhile(lambda interval: interval.end <= now, upcoming))

    def _latest_complete(self, cursor: datetime | None, now: datetime) -> DataInterval | None:
        """The latest interval ending by `now`, found without walking from start_date.

        A DAG that started years ago with catchup=False must stay cheap on every tick, so look
        back from `now` over a window that grows until it holds a complete interval.
        """
        floors = [as_utc(cursor)] if cursor is not None else []
        if self.start is not None:
            floors.append(self.start - self.lead)
        floor = max(floors, default=None)
        if floor is None or floor > now:
            return None
        span = timedelta(hours=1)
        while True:
            probe = floor if now - floor <= span else now - span
            latest = None
            for interval, _ in self._upcoming(probe - TICK):
                if interval.end > now:
                    break
                latest = interval
            if latest is not None or probe == floor:
                return latest
            span *= 8

    def first_cursor(self, now: datetime) -> datetime | None:
        """Where a schedule with no start_date begins: the logical date of its first run,
        decided once, when the scheduler first meets it (it keeps the answer as its cursor).
        None for every schedule that needs a start_date."""
        return None

    def occurrences(self, after: datetime | None, n: int) -> list[Occurrence]:
        """The next n intervals with logical date strictly after `after`, with DST notes (for
        `dagrun dags next`)."""
        return [Occurrence(iv, note) for iv, note in islice(self._upcoming(after), max(n, 0))]

    def logical_date_on_day(self, day: date) -> datetime | None:
        """The first scheduled logical date on that local calendar day, or None."""
        day_start = wall_to_utc(datetime.combine(day, time()), self.tz)
        next_day_start = wall_to_utc(datetime.combine(day + ONE_DAY, time()), self.tz)
        interval = self.next_interval(day_start - TICK)
        if interval is None or interval.start >= next_day_start:
            return None
        return interval.start


class NullTimetable(Timetable):
    """schedule=None: no scheduled runs; manual runs and backfills still use the dates."""

    schedulable = False

    def __init__(self, tz: ZoneInfo, start: datetime | None, end: datetime | None):
        super().__init__("None (manual only)", tz, start, end)

    def _intervals_after(self, after: datetime) -> Iterator[tuple[DataInterval, str | None]]:
        return iter(())


class OnceTimetable(Timetable):
    """@once: a single interval with start = end = start_date."""

    start: datetime  # always set: a scheduled timetable needs a start_date

    def __init__(self, tz: ZoneInfo, start: datetime, end: datetime | None):
        super().__init__("@once", tz, start, end)

    def _intervals_after(self, after: datetime) -> Iterator[tuple[DataInterval, str | None]]:
        if self.start > after:
            yield DataInterval(self.start, self.start), None


class DeltaTimetable(Timetable):
    """A timedelta: intervals of fixed real duration from start_date (UTC arithmetic, no DST)."""

    start: datetime  # always set: a scheduled timetable needs a start_date

    def __init__(self, delta: timedelta, tz: ZoneInfo, start: datetime, end: datetime | None):
        super().__init__(f"every {delta}", tz, start, end)
        self.delta = delta

    def _intervals_after(self, after: datetime) -> Iterator[tuple[DataInterval, str | None]]:
        steps = 0 if after < self.start else (after - self.start) // self.delta + 1
        logical = self.start + steps * self.delta
        while True:
            following = logical + self.delta
            yield DataInterval(logical, following), None
            logical = following


class _Fire(NamedTuple):
    instant: datetime
    note: str | None = None
    skipped: tuple[str, ...] = ()  # wall times lost in a DST gap that fire at this instant
    regular: bool = True  # a wall time that exists also fires at this instant


class CronTimetable(Timetable):
    """A cron expression or preset, evaluated in the DAG's timezone (or in ``zone``, a
    schedule object's own).

    Intervals run from one fire time to the next. `fixed_time` tells which DST rule applies.
    """

    start: datetime | None  # set, except for a trigger schedule that starts from now

    def __init__(
        self,
        expression: str,
        tz: ZoneInfo,
        start: datetime | None,
        end: datetime | None,
        expansion: Expansion | None = None,
        zone: ZoneInfo | None = None,
    ):
        self.cron_tz = zone or tz
        shown = expression if zone in (None, tz) else f"{expression} ({self.cron_tz.key})"
        super().__init__(shown, tz, start, end)
        self._spec = compile_cron(expression, expansion)
        self.expression = self._spec.expression
        self.fixed_time = self._spec.fixed_time

    @property
    def expansion(self) -> Expansion | None:
        """What ``DagSpec.cron`` keeps: the parsed fields, unless the expression needs
        croniter at every step (L, #, W) anyway."""
        return self._spec.expansion

    def _intervals_after(self, after: datetime) -> Iterator[tuple[DataInterval, str | None]]:
        fires = self._fires_after(after)
        current = next(fires, None)
        if current is None:
            return
        for following in fires:
            yield DataInterval(current.instant, following.instant), current.note
            current = following

    def _fires_after(self, after: datetime) -> Iterator[_Fire]:
        """Fire instants strictly after `after`, ascending, never repeating an instant."""
        after = as_utc(after)
        walls = self._spec.walls_from(self._scan_from(after))
        fires = self._fixed_time_fires(walls) if self.fixed_time else self._real_time_fires(walls)
        return self._merged(fire for fire in fires if fire.instant > after)

    def _scan_from(self, after: datetime) -> datetime:
        """The earliest wall time that can map to an instant after `after`.

        Starting at `after`'s own wall time would miss the repeated hour of a fall-back that
        begins before it; the lowest nearby offset covers it.
        """
        offset = min(self._offset_at(after), self._offset_at(after + _OFFSET_HORIZON))
        return (after + offset).replace(tzinfo=None)

    def _offset_at(self, instant: datetime) -> timedelta:
        offset = instant.astimezone(self.cron_tz).utcoffset()
        assert offset is not None  # an instant in a ZoneInfo zone always has an offset
        return offset

    def _fixed_time_fires(self, walls: Iterable[tuple[datetime, datetime]]) -> Iterator[_Fire]:
        """Debian's rule: a skipped wall time fires at the end of its gap, a repeated one once."""
        for wall, folded in walls:
            kind, first, _ = resolve_reading(wall, folded, self.cron_tz)
            if kind is Kind.SKIPPED:
                label = hhmm(wall)
                note = f"moved: {label} skipped by DST, fires at {local_text(first, self.cron_tz)}"
                yield _Fire(first, note, (label,), regular=False)
            elif kind is Kind.REPEATED:
                yield _Fire(first, f"repeated {hhmm(wall)} fires once (first occurrence)")
            else:
                yield _Fire(first)

    def _real_time_fires(self, walls: Iterable[tuple[datetime, datetime]]) -> Iterator[_Fire]:
        """Real time: skipped wall times do not fire; repeated ones fire at both instants.

        Walls come in wall-clock order, but the second 01:15 happens after the first 01:45, so
        second occurrences wait in a queue until real time reaches them.
        """
        repeats: deque[_Fire] = deque()
        for wall, folded in walls:
            kind, first, second = resolve_reading(wall, folded, self.cron_tz)
            if kind is Kind.SKIPPED:
                continue
            while repeats and repeats[0].instant < first:
                yield repeats.popleft()
            if kind is Kind.REPEATED:
                assert second is not None  # a repeated wall time has its second instant
                label = hhmm(wall)
                yield _Fire(first, f"real time: 1st {label} ({_zone_name(first, self.cron_tz)})")
                repeats.append(
                    _Fire(second, f"real time: 2nd {label} ({_zone_name(second, self.cron_tz)})")
                )
            else:
                yield _Fire(first)
        yield from repeats

    def _merged(self, fires: Iterable[_Fire]) -> Iterator[_Fire]:
        """Fires at the same instant (several wall times in one gap) become one; nothing ever
        goes backwards, so no instant can fire twice."""
        pending: _Fire | None = None
        for fire in fires:
            if pending is not None and fire.instant <= pending.instant:
                if fire.instant == pending.instant:
                    pending = self._combine(pending, fire)
                continue
            if pending is not None:
                yield pending
            pending = fire
        if pending is not None:
            yield pending

    def _combine(self, one: _Fire, other: _Fire) -> _Fire:
        skipped = one.skipped + other.skipped
        regular = one.regular or other.regular
        if not skipped:
            return one
        where = local_text(one.instant, self.cron_tz)
        if regular:
            note = f"merged: {', '.join(skipped)} skipped by DST, fires once together with {where}"
        else:
            note = f"merged: {', '.join(skipped)} skipped by DST, fire once at {where}"
        return _Fire(one.instant, note, skipped, regular)


class CronTriggerTimetable(CronTimetable):
    """A run at each fire time, due then, covering the ``interval`` before it (Airflow's
    CronTriggerTimetable): its logical date is the start of that interval, as for every
    run (DESIGN section 3, and Airflow's ``DagRunInfo.interval(fire - interval, fire)``), so
    the fire time itself with the default interval of 0. Fire times follow the same DST
    rule as every cron schedule, and start_date and end_date bound them (``lead``), as
    Airflow bounds a trigger schedule's fires by its start and end dates.
    """

    def __init__(
        self,
        expression: str,
        tz: ZoneInfo,
        start: datetime | None,
        end: datetime | None,
        expansion: Expansion | None = None,
        zone: ZoneInfo | None = None,
        *,
        interval: timedelta = timedelta(0),
        run_immediately: schedules.RunImmediately = False,
    ):
        super().__init__(expression, tz, start, end, expansion, zone)
        self.description = f"trigger {self.description}" + (
            f" covering {interval}" if interval else ""
        )
        self.lead = self.interval = interval
        self.run_immediately = run_immediately

    def _intervals_after(self, after: datetime) -> Iterator[tuple[DataInterval, str | None]]:
        for fire in self._fires_after(after + self.interval):
            yield DataInterval(fire.instant - self.interval, fire.instant), fire.note

    def first_cursor(self, now: datetime) -> datetime | None:
        """Without a start_date, the first run is chosen from ``now`` by ``run_immediately``
        as Airflow documents it: True the latest fire at or before now, False the next, a
        duration the latest if no older than that, None the latest if no older than a tenth
        of the gap to the next fire and at least 5 minutes (Airflow 3's rule; its code also
        reads False so, against its documentation and 2.10's code, which wait for the next)."""
        if self.start is not None:
            return None
        now = as_utc(now)
        after = next(self._fires_after(now - TICK), None)
        past = now if after is not None and after.instant == now else self._fire_before(now)
        ahead = None if after is None else after.instant
        chosen = ahead
        if past is not None:
            immediately = self.run_immediately
            if immediately is True or ahead is None:
                chosen = past
            elif isinstance(immediately, timedelta):
                chosen = past if now - past <= immediately else ahead
            elif immediately is None:
                buffer = max((ahead - past) / 10, timedelta(minutes=5))
                chosen = past if now - past <= buffer else ahead
        return None if chosen is None else chosen - self.interval

    def _fire_before(self, instant: datetime) -> datetime | None:
        """The latest fire strictly before ``instant``, looking back over a window that
        grows until it holds one (a yearly schedule needs a year; none within a century)."""
        span = timedelta(hours=1)
        while span < timedelta(days=36600):
            found = None
            for fire in self._fires_after(instant - span):
                if fire.instant >= instant:
                    break
                found = fire.instant
            if found is not None:
                return found
            span *= 8
        return None


def _zone_name(instant: datetime, tz: ZoneInfo) -> str:
    return instant.astimezone(tz).strftime("%Z")


# --- construction -------------------------------------------------------------------------------


#: What ``DAG(schedule=...)`` may be, besides a list of assets; a dict is a schedule object
#: as a stored spec keeps it (``schedules.from_data``).
TimeSchedule = str | timedelta | schedules.Schedule | dict[str, Any] | None


def make_timetable(
    schedule: TimeSchedule,
    timezone: str = "UTC",
    start_date: date | datetime | str | None = None,
    end_date: date | datetime | str | None = None,
    cron: Expansion | None = None,
) -> Timetable:
    """Build and validate a DAG's timetable; every mistake is a one-line ScheduleError.
    ``cron`` is a cron schedule's expansion from an earlier parse (``DagSpec.cron``)."""
    if isinstance(schedule, dict):
        schedule = schedules.from_data(schedule)
    kind = _schedule_kind(schedule, cron)
    tz = get_zone(timezone)
    start = None if start_date is None else to_utc(start_date, tz, what="start_date")
    end = None if end_date is None else to_utc(end_date, tz, what="end_date")
    if start is not None and end is not None and end < start:
        raise ScheduleError(
            f"end_date '{end_date}' is before start_date '{start_date}'", value=end_date
        )
    if kind == "none":
        return NullTimetable(tz, start, end)
    if isinstance(schedule, schedules.CronTrigger):  # the one schedule that may start from now
        zone = None if schedule.timezone is None else get_zone(schedule.timezone)
        return CronTriggerTimetable(
            schedule.cron,
            tz,
            start,
            end,
            cron,
            zone,
            interval=schedule.interval,
            run_immediately=schedule.run_immediately,
        )
    if start is None:
        raise ScheduleError("start_date is required for a scheduled DAG", value=schedule)
    if kind == "once":
        return OnceTimetable(tz, start, end)
    if isinstance(schedule, schedules.DeltaIntervals):
        schedule = schedule.delta
    if isinstance(schedule, timedelta):
        return DeltaTimetable(schedule, tz, start, end)
    if isinstance(schedule, schedules.CronIntervals):
        zone = None if schedule.timezone is None else get_zone(schedule.timezone)
        return CronTimetable(schedule.cron, tz, start, end, cron, zone)
    assert isinstance(schedule, str)  # _schedule_kind's "cron"
    return CronTimetable(schedule.strip(), tz, start, end, cron)


def _schedule_kind(schedule: object, cron: Expansion | None = None) -> str:
    """Validate the schedule itself first, so its error wins over a missing start_date."""
    if schedule is None:
        return "none"
    if isinstance(schedule, schedules.SCHEDULE_TYPES):
        return "object"  # checked when it was made
    if isinstance(schedule, timedelta):
        if schedule <= timedelta(0):
            raise ScheduleError(
                f"invalid schedule timedelta '{schedule}': it must be positive", value=schedule
            )
        return "delta"
    if isinstance(schedule, str):
        if schedule.strip().lower() == "@once":
            return "once"
        compile_cron(schedule.strip(), cron)
        return "cron"
    raise ScheduleError(
        f"invalid schedule {schedule!r}: expected a cron expression, a preset such as "
        "'@daily', a timedelta, a schedule object (CronTrigger, CronIntervals, "
        "DeltaIntervals) or None",
        value=schedule,
    )

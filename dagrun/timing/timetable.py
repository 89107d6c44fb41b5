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
from typing import TYPE_CHECKING, NamedTuple
from zoneinfo import ZoneInfo

from dagrun.errors import ScheduleError
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

if TYPE_CHECKING:
    pass

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
        """Intervals after `after` (or from start), within start_date and end_date."""
        if self.start is None:
            return
        floor = self.start - TICK
        after = floor if after is None else max(as_utc(after), floor)
        for interval, note in self._intervals_after(after):
            if self.end is not None and interval.start > self.end:
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
        if self.start is None:
            return None
        floor = self.start if cursor is None else max(self.start, as_utc(cursor))
        if floor > now:
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
    """A cron expression or preset, evaluated in the DAG's timezone.

    Intervals run from one fire time to the next. `fixed_time` tells which DST rule applies.
    """

    def __init__(
        self,
        expression: str,
        tz: ZoneInfo,
        start: datetime,
        end: datetime | None,
        expansion: Expansion | None = None,
    ):
        super().__init__(expression, tz, start, end)
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
        offset = instant.astimezone(self.tz).utcoffset()
        assert offset is not None  # an instant in a ZoneInfo zone always has an offset
        return offset

    def _fixed_time_fires(self, walls: Iterable[tuple[datetime, datetime]]) -> Iterator[_Fire]:
        """Debian's rule: a skipped wall time fires at the end of its gap, a repeated one once."""
        for wall, folded in walls:
            kind, first, _ = resolve_reading(wall, folded, self.tz)
            if kind is Kind.SKIPPED:
                label = hhmm(wall)
                note = f"moved: {label} skipped by DST, fires at {local_text(first, self.tz)}"
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
            kind, first, second = resolve_reading(wall, folded, self.tz)
            if kind is Kind.SKIPPED:
                continue
            while repeats and repeats[0].instant < first:
                yield repeats.popleft()
            if kind is Kind.REPEATED:
                assert second is not None  # a repeated wall time has its second instant
                label = hhmm(wall)
                yield _Fire(first, f"real time: 1st {label} ({_zone_name(first, self.tz)})")
                repeats.append(
                    _Fire(second, f"real time: 2nd {label} ({_zone_name(second, self.tz)})")
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
        where = local_text(one.instant, self.tz)
        if regular:
            note = f"merged: {', '.join(skipped)} skipped by DST, fires once together with {where}"
        else:
            note = f"merged: {', '.join(skipped)} skipped by DST, fire once at {where}"
        return _Fire(one.instant, note, skipped, regular)


def _zone_name(instant: datetime, tz: ZoneInfo) -> str:
    return instant.astimezone(tz).strftime("%Z")


# --- construction -------------------------------------------------------------------------------


def make_timetable(
    schedule: str | timedelta | None,
    timezone: str = "UTC",
    start_date: date | datetime | str | None = None,
    end_date: date | datetime | str | None = None,
    cron: Expansion | None = None,
) -> Timetable:
    """Build and validate a DAG's timetable; every mistake is a one-line ScheduleError.
    ``cron`` is a cron schedule's expansion from an earlier parse (``DagSpec.cron``)."""
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
    if start is None:
        raise ScheduleError("start_date is required for a scheduled DAG", value=schedule)
    if kind == "once":
        return OnceTimetable(tz, start, end)
    if kind == "delta":
        assert isinstance(schedule, timedelta)  # _schedule_kind's "delta"
        return DeltaTimetable(schedule, tz, start, end)
    assert isinstance(schedule, str)  # _schedule_kind's "cron"
    return CronTimetable(schedule.strip(), tz, start, end, cron)


def _schedule_kind(schedule: object, cron: Expansion | None = None) -> str:
    """Validate the schedule itself first, so its error wins over a missing start_date."""
    if schedule is None:
        return "none"
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
        "'@daily', a timedelta or None",
        value=schedule,
    )

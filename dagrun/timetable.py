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

import copy
import hashlib
import math
import re
from abc import ABC, abstractmethod
from bisect import bisect_left
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from enum import Enum
from functools import lru_cache
from itertools import islice, takewhile
from typing import TYPE_CHECKING, NamedTuple
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from dagrun.errors import ScheduleError

if TYPE_CHECKING:
    from croniter import croniter

#: croniter's expansion of a plain cron expression: minutes, hours, days, months, weekdays,
#: each a tuple of numbers or ``("*",)``.
Expansion = tuple[tuple[int | str, ...], ...]

__all__ = [
    "PRESETS",
    "UTC",
    "CronTimetable",
    "DataInterval",
    "DeltaTimetable",
    "NullTimetable",
    "Occurrence",
    "OnceTimetable",
    "Timetable",
    "get_zone",
    "make_timetable",
    "parse_cli_instant",
    "parse_cli_range",
    "parse_duration",
    "spread_offset",
    "to_utc",
    "wall_to_utc",
]

_TICK = timedelta(microseconds=1)
_ONE_DAY = timedelta(days=1)
# How far ahead a cron day search looks before concluding there is no further fire (as croniter).
_SEARCH_YEARS = 50
# Offsets are sampled this far apart to find where a fire time's wall-clock scan must begin;
# no zone changes its offset twice within it.
_OFFSET_HORIZON = timedelta(days=2)

PRESETS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
_FIELD_NAMES = ("minute", "hour", "day-of-month", "month", "day-of-week")
_ISO_HINT = "expected an ISO 8601 date or datetime such as 2026-01-31 or 2026-01-31T02:30"


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


# --- zones, instants and durations ------------------------------------------------------------


def get_zone(name: str) -> ZoneInfo:
    """The IANA zone called `name`, so that a typo fails when the DAG loads, not at a run."""
    if isinstance(name, ZoneInfo):
        return name
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError, OSError):
        raise ScheduleError(f"unknown timezone '{name}'", value=name) from None


def to_utc(value: date | datetime | str, tz: ZoneInfo, *, what: str = "date") -> datetime:
    """An aware UTC instant for a user-supplied date, datetime or ISO 8601 string.

    Naive values are wall-clock time in `tz`: an ambiguous one means its first occurrence and
    one skipped by a DST gap means the first instant after the gap, the same choices a
    fixed-time schedule makes. `what` names the value in the error message.
    """
    if isinstance(value, str):
        value = _parse_iso(value, what)
    if isinstance(value, datetime):
        if value.utcoffset() is None:
            return wall_to_utc(value.replace(tzinfo=None), tz)
        return value.astimezone(UTC)
    if isinstance(value, date):
        return wall_to_utc(datetime.combine(value, time()), tz)
    raise ScheduleError(f"invalid {what} {value!r}: {_ISO_HINT}", value=value)


def _parse_iso(text: str, what: str) -> datetime:
    try:
        return datetime.fromisoformat(text.strip())
    except ValueError:
        raise ScheduleError(f"invalid {what} '{text}': {_ISO_HINT}", value=text) from None


def wall_to_utc(wall: datetime, tz: ZoneInfo) -> datetime:
    """The instant of naive wall time `wall` in `tz` (first occurrence; end of a gap)."""
    return _resolve_wall(wall, tz).first


def _as_utc(instant: datetime) -> datetime:
    """`instant` in UTC; naive values are already UTC (that is how the store keeps them)."""
    if instant.utcoffset() is None:
        return instant.replace(tzinfo=UTC)
    return instant.astimezone(UTC)


_DURATION_UNITS = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}
_NUMBER = r"\d+(?:\.\d+)?"
_DURATION_RE = re.compile(rf"(?:{_NUMBER}[wdhms])+")
_DURATION_PART = re.compile(rf"({_NUMBER})([wdhms])")


def parse_duration(value: str | int | float | timedelta) -> timedelta:
    """A non-negative duration from seconds, a timedelta, or text such as "10m" or "1h30m"."""
    seconds: float | None = None
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str):
        seconds = _duration_text_seconds(value)
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        raise ScheduleError(
            f"invalid duration '{value}': expected seconds or a number with a unit "
            "(s, m, h, d, w), e.g. 30s, 10m, 2h, 1d",
            value=value,
        )
    return value if isinstance(value, timedelta) else timedelta(seconds=seconds)


def _duration_text_seconds(text: str) -> float | None:
    compact = "".join(text.split()).lower()
    if re.fullmatch(_NUMBER, compact):
        return float(compact)
    if not _DURATION_RE.fullmatch(compact):
        return None
    return sum(float(n) * _DURATION_UNITS[unit] for n, unit in _DURATION_PART.findall(compact))


def spread_offset(dag_id: str, window: timedelta | str | int | float) -> timedelta:
    """A delay in [0, window) that depends only on `dag_id`, to spread DAGs due together.

    hashlib rather than hash(): Python salts str hashes per process, and every scheduler (and
    every restart) must agree on the delay. Whole seconds when the window allows, for readable
    logs.
    """
    window = parse_duration(window)
    unit = timedelta(seconds=1) if window >= timedelta(seconds=1) else _TICK
    slots = window // unit
    if slots <= 0:
        return timedelta(0)
    digest = hashlib.sha256(dag_id.encode("utf-8")).digest()
    return (int.from_bytes(digest[:8], "big") % slots) * unit


def iso(value: datetime | None) -> str | None:
    """How dagrun writes an instant for machines (``--json``, the API, URLs): ISO 8601 in
    UTC with its offset, ``2026-01-01T05:00:00+00:00``; None stays None."""
    return value.astimezone(UTC).isoformat() if value is not None else None


def parse_cli_instant(value: str, tz: ZoneInfo, *, what: str = "date") -> datetime:
    """One command-line instant: a date alone is local midnight, an offset is taken as given.

    `what` names the option in the error message.
    """
    day = _date_only(value)
    if day is not None:
        return wall_to_utc(datetime.combine(day, time()), tz)
    return to_utc(value, tz, what=what)


def parse_cli_range(start: str, end: str, tz: ZoneInfo) -> tuple[datetime, datetime]:
    """A command-line [start, end] range in UTC; a date-only end includes its whole local day."""
    first = parse_cli_instant(start, tz, what="start")
    end_day = _date_only(end)
    if end_day is None:
        last = to_utc(end, tz, what="end")
    else:
        last = wall_to_utc(datetime.combine(end_day + _ONE_DAY, time()), tz) - _TICK
    if last < first:
        raise ScheduleError(f"end {end} is before start {start}", value=end)
    return first, last


def _date_only(value: str) -> date | None:
    if not isinstance(value, str):
        return None
    try:
        return date.fromisoformat(value.strip())
    except ValueError:
        return None


# --- wall-clock time to instants ----------------------------------------------------------------


class _Kind(Enum):
    NORMAL = "normal"
    REPEATED = "repeated"  # fall-back: the wall time happens twice
    SKIPPED = "skipped"  # spring-forward: the wall time never happens


class _Resolved(NamedTuple):
    kind: _Kind
    first: datetime  # the (first) instant; for a skipped wall time, the end of the gap
    second: datetime | None  # the repeat, for a repeated wall time


def _resolve_wall(wall: datetime, tz: ZoneInfo) -> _Resolved:
    """Classify naive wall time `wall` in `tz` and give its instants."""
    return _resolve_reading(wall.replace(tzinfo=UTC), wall.replace(tzinfo=UTC, fold=1), tz)


def _resolve_reading(reading: datetime, folded: datetime, tz: ZoneInfo) -> _Resolved:
    """Classify a local wall-clock reading; `folded` is the same reading with fold=1.

    Readings carry tzinfo=UTC only so that `reading - offset` is directly the aware instant:
    zone.utcoffset() reads the clock fields and fold, not the tzinfo. This avoids re-zoning
    datetimes (datetime.replace and astimezone), which dominated the cost of iterating.
    """
    early_offset = tz.utcoffset(reading)
    first = reading - early_offset
    late_offset = tz.utcoffset(folded)
    if late_offset == early_offset:
        return _Resolved(_Kind.NORMAL, first, None)
    second = reading - late_offset
    if first < second:
        return _Resolved(_Kind.REPEATED, first, second)
    # PEP 495: in a gap fold=0 applies the old offset and fold=1 the new one, so the order
    # flips and the transition lies in (second, first].
    return _Resolved(_Kind.SKIPPED, _transition_between(second, first, tz), None)


@lru_cache(maxsize=256)
def _transition_between(before: datetime, after: datetime, tz: ZoneInfo) -> datetime:
    """The exact instant the offset changes between `before` and `after` (bisection).

    The fold=1 offset only says where the gap ends in wall time; the change itself must be
    found in the zone data. tzdata changes happen on whole seconds, so bisect on seconds.
    """
    new_offset = after.astimezone(tz).utcoffset()
    lo, hi = math.floor(before.timestamp()), math.ceil(after.timestamp())
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if datetime.fromtimestamp(mid, tz).utcoffset() == new_offset:
            hi = mid
        else:
            lo = mid
    return datetime.fromtimestamp(hi, UTC)


def _hhmm(wall: datetime) -> str:
    return wall.strftime("%H:%M")


def _local(instant: datetime, tz: ZoneInfo) -> str:
    return instant.astimezone(tz).strftime("%H:%M %Z")


# --- cron expressions ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _CronSpec:
    """A parsed 5-field expression: the times of day it fires and the days it fires on.

    In a 5-field cron the hour and minute fields never depend on the day, so every matching
    day fires at the same `times`. Day matching is done here for plain fields; `exotic` is a
    croniter for expressions using L, # or W, which only croniter resolves.
    """

    expression: str
    times: tuple[time, ...]
    pairs: tuple[tuple[time, time], ...]  # each time with its fold=1 twin (later offset)
    months: frozenset[int] | None
    days: frozenset[int] | None
    weekdays: frozenset[int] | None
    fixed_time: bool
    exotic: croniter | None = field(default=None, compare=False)
    expansion: Expansion | None = field(default=None, compare=False)

    def next_day(self, day: date) -> date | None:
        """The first day on or after `day` with fire times; None past the search horizon."""
        if self.exotic is not None:
            return self._next_day_by_croniter(day)
        horizon = day.year + _SEARCH_YEARS
        try:
            while day.year <= horizon:
                if self.months is not None and day.month not in self.months:
                    day = date(day.year + day.month // 12, day.month % 12 + 1, 1)
                elif self._day_matches(day):
                    return day
                else:
                    day += _ONE_DAY
        except (OverflowError, ValueError):
            pass
        return None

    def _day_matches(self, day: date) -> bool:
        dom_ok = self.days is None or day.day in self.days
        dow_ok = self.weekdays is None or day.isoweekday() % 7 in self.weekdays
        if self.days is not None and self.weekdays is not None:
            return dom_ok or dow_ok  # cron's rule: both restricted means either will do
        return dom_ok and dow_ok

    def _next_day_by_croniter(self, day: date) -> date | None:
        from croniter import CroniterBadDateError

        walker = copy.copy(self.exotic)  # own cursor state, shared parsed fields
        try:
            just_before = datetime.combine(day, time()) - timedelta(minutes=1)
            return walker.get_next(datetime, start_time=just_before).date()
        except (CroniterBadDateError, OverflowError, ValueError):
            return None

    def walls_from(self, start: datetime) -> Iterator[tuple[datetime, datetime]]:
        """Every wall time >= naive `start` the expression names, in order, as readings.

        Each comes as (reading, folded) for `_resolve_reading`, built by datetime.combine,
        which is cheap where datetime.replace is not.
        """
        day = self.next_day(start.date())
        skip = bisect_left(self.times, start.time()) if day == start.date() else 0
        while day is not None:
            for moment, folded in self.pairs[skip:]:
                yield datetime.combine(day, moment, UTC), datetime.combine(day, folded, UTC)
            skip = 0
            try:
                day = self.next_day(day + _ONE_DAY)
            except OverflowError:
                return


def _bad_cron(expression: str, reason: str) -> ScheduleError:
    return ScheduleError(f"invalid cron expression '{expression}': {reason}", value=expression)


def _croniter_reason(exc: Exception) -> str:
    """croniter's message without the expression it repeats ("[61 * * * *] is not ...")."""
    text = re.sub(r"^\[[^\]]*\]\s*", "", str(exc).strip())
    return re.sub(r"^is not acceptable[,.]?\s*", "", text) or "not acceptable"


def _check_fields(expression: str, fields: list[str]) -> None:
    """Name the first bad field, which croniter's own messages do not."""
    from croniter import CroniterError, croniter

    for index, text in enumerate(fields):
        probe = ["0", "0", "*", "*", "*"]
        probe[index] = text
        try:
            croniter.expand(" ".join(probe))
        except (CroniterError, ValueError, TypeError) as exc:
            name = _FIELD_NAMES[index]
            reason = f"bad {name} field '{text}': {_croniter_reason(exc)}"
            raise _bad_cron(expression, reason) from None


def _values(expanded: list, full: range) -> tuple[int, ...]:
    return tuple(full) if "*" in expanded else tuple(sorted(int(v) for v in expanded))


def _restricted(expanded: list) -> frozenset[int] | None:
    return None if "*" in expanded else frozenset(int(v) for v in expanded)


def _is_fixed_time(fields: list[str]) -> bool:
    """Debian cron's test for the DST rule: no wildcard or step in the minute and hour fields.

    "?" is croniter's synonym for "*", so it counts as a wildcard too.
    """
    return not any(mark in fields[i] for i in (0, 1) for mark in "*/?")


def _croniter_walker(fields: list[str]) -> croniter:
    """A naive-time croniter, copied before each use (it keeps its cursor in the object)."""
    from croniter import croniter

    return croniter(" ".join(fields), datetime(2000, 1, 1), ret_type=datetime)


@lru_cache(maxsize=512)
def _compile_cron(expression: str, expansion: Expansion | None = None) -> _CronSpec:
    """Parse and validate once per expression: the scheduler rebuilds timetables every tick.
    With ``expansion`` (kept from an earlier parse) croniter is not consulted."""
    fields = PRESETS.get(expression.lower(), expression).split()
    if expression.startswith("@") and expression.lower() not in PRESETS:
        names = ", ".join([*PRESETS, "@once"])
        raise _bad_cron(expression, f"unknown preset (use one of {names})")
    if len(fields) != 5:
        raise _bad_cron(
            expression, f"expected 5 fields ({' '.join(_FIELD_NAMES)}), got {len(fields)}"
        )
    if expansion is None:
        expanded, nth_weekday = _expand(expression, fields)
    else:
        expanded, nth_weekday = [list(values) for values in expansion], {}
    minutes, hours, days, months, weekdays = expanded
    exotic = bool(nth_weekday) or "l" in days or "w" in fields[2].lower()
    times = tuple(
        time(h, m) for h in _values(hours, range(24)) for m in _values(minutes, range(60))
    )
    spec = _CronSpec(
        expression=" ".join(fields),
        times=times,
        pairs=tuple((moment, moment.replace(fold=1)) for moment in times),
        months=_restricted(months),
        days=None if exotic else _restricted(days),
        weekdays=None if exotic else _restricted(weekdays),
        fixed_time=_is_fixed_time(fields),
        exotic=_croniter_walker(fields) if exotic else None,
        expansion=None if exotic else tuple(tuple(values) for values in expanded),
    )
    if spec.next_day(date(2000, 1, 1)) is None:
        raise _bad_cron(expression, "no day matches it, so it never fires")
    return spec


def _expand(expression: str, fields: list[str]) -> tuple[list, dict]:
    """croniter's expansion of the fields (and its nth-weekday map), validated field by field."""
    from croniter import CroniterError, croniter

    _check_fields(expression, fields)
    try:
        return croniter.expand(" ".join(fields))
    except (CroniterError, ValueError, TypeError) as exc:
        raise _bad_cron(expression, _croniter_reason(exc)) from None


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
        floor = self.start - _TICK
        after = floor if after is None else max(_as_utc(after), floor)
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
        last = _as_utc(last)
        for interval, _ in self._upcoming(_as_utc(first) - _TICK):
            if interval.start > last:
                return
            yield interval

    def due_intervals(
        self, cursor: datetime | None, now: datetime, catchup: bool
    ) -> list[DataInterval]:
        """Intervals whose logical date >= cursor (cursor None = from start) and whose end <= now,
        oldest first. catchup=False returns at most one: the latest complete interval (if it is
        >= cursor)."""
        now = _as_utc(now)
        if not self.schedulable:
            return []
        if not catchup:
            latest = self._latest_complete(cursor, now)
            return [latest] if latest is not None else []
        after = None if cursor is None else _as_utc(cursor) - _TICK
        upcoming = (interval for interval, _ in self._upcoming(after))
        return list(takewhile(lambda interval: interval.end <= now, upcoming))

    def _latest_complete(self, cursor: datetime | None, now: datetime) -> DataInterval | None:
        """The latest interval ending by `now`, found without walking from start_date.

        A DAG that started years ago with catchup=False must stay cheap on every tick, so look
        back from `now` over a window that grows until it holds a complete interval.
        """
        if self.start is None:
            return None
        floor = self.start if cursor is None else max(self.start, _as_utc(cursor))
        if floor > now:
            return None
        span = timedelta(hours=1)
        while True:
            probe = floor if now - floor <= span else now - span
            latest = None
            for interval, _ in self._upcoming(probe - _TICK):
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
        next_day_start = wall_to_utc(datetime.combine(day + _ONE_DAY, time()), self.tz)
        interval = self.next_interval(day_start - _TICK)
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

    def __init__(self, tz: ZoneInfo, start: datetime, end: datetime | None):
        super().__init__("@once", tz, start, end)

    def _intervals_after(self, after: datetime) -> Iterator[tuple[DataInterval, str | None]]:
        if self.start > after:
            yield DataInterval(self.start, self.start), None


class DeltaTimetable(Timetable):
    """A timedelta: intervals of fixed real duration from start_date (UTC arithmetic, no DST)."""

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
        self._spec = _compile_cron(expression, expansion)
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
        for following in fires:
            yield DataInterval(current.instant, following.instant), current.note
            current = following

    def _fires_after(self, after: datetime) -> Iterator[_Fire]:
        """Fire instants strictly after `after`, ascending, never repeating an instant."""
        after = _as_utc(after)
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
        return instant.astimezone(self.tz).utcoffset()

    def _fixed_time_fires(self, walls: Iterable[tuple[datetime, datetime]]) -> Iterator[_Fire]:
        """Debian's rule: a skipped wall time fires at the end of its gap, a repeated one once."""
        for wall, folded in walls:
            kind, first, _ = _resolve_reading(wall, folded, self.tz)
            if kind is _Kind.SKIPPED:
                label = _hhmm(wall)
                note = f"moved: {label} skipped by DST, fires at {_local(first, self.tz)}"
                yield _Fire(first, note, (label,), regular=False)
            elif kind is _Kind.REPEATED:
                yield _Fire(first, f"repeated {_hhmm(wall)} fires once (first occurrence)")
            else:
                yield _Fire(first)

    def _real_time_fires(self, walls: Iterable[tuple[datetime, datetime]]) -> Iterator[_Fire]:
        """Real time: skipped wall times do not fire; repeated ones fire at both instants.

        Walls come in wall-clock order, but the second 01:15 happens after the first 01:45, so
        second occurrences wait in a queue until real time reaches them.
        """
        repeats: deque[_Fire] = deque()
        for wall, folded in walls:
            kind, first, second = _resolve_reading(wall, folded, self.tz)
            if kind is _Kind.SKIPPED:
                continue
            while repeats and repeats[0].instant < first:
                yield repeats.popleft()
            if kind is _Kind.REPEATED:
                label = _hhmm(wall)
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
        where = _local(one.instant, self.tz)
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
        return DeltaTimetable(schedule, tz, start, end)
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
        _compile_cron(schedule.strip(), cron)
        return "cron"
    raise ScheduleError(
        f"invalid schedule {schedule!r}: expected a cron expression, a preset such as "
        "'@daily', a timedelta or None",
        value=schedule,
    )

"""Cron expressions, and the daylight-saving rule that maps their wall-clock fires to instants.

croniter parses and validates expressions and resolves the exotic day syntax; we walk naive
wall-clock times through the local calendar ourselves and resolve each one to an instant
(``resolve_reading``), which makes the DST rule of DESIGN section 3 explicit: a fixed-time
fire skipped by spring-forward fires at the first instant after the gap, one repeated by
fall-back fires at its first occurrence. ``timetable.CronTimetable`` uses these.
"""

from __future__ import annotations

import copy
import re
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from typing import TYPE_CHECKING

from dagrun.errors import ScheduleError
from dagrun.timing.instants import ONE_DAY

if TYPE_CHECKING:
    from croniter import croniter

#: croniter's expansion of a plain cron expression: minutes, hours, days, months, weekdays,
#: each a tuple of numbers or ``("*",)``.
Expansion = tuple[tuple[int | str, ...], ...]


# How far ahead a cron day search looks before concluding there is no further fire (as croniter).
_SEARCH_YEARS = 50

PRESETS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
_FIELD_NAMES = ("minute", "hour", "day-of-month", "month", "day-of-week")


@dataclass(frozen=True)
class CronSpec:
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
                    day += ONE_DAY
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

        assert self.exotic is not None  # next_day calls this only for an exotic expression
        walker = copy.copy(self.exotic)  # own cursor state, shared parsed fields
        try:
            just_before = datetime.combine(day, time()) - timedelta(minutes=1)
            return walker.get_next(datetime, start_time=just_before).date()
        except (CroniterBadDateError, OverflowError, ValueError):
            return None

    def walls_from(self, start: datetime) -> Iterator[tuple[datetime, datetime]]:
        """Every wall time >= naive `start` the expression names, in order, as readings.

        Each comes as (reading, folded) for `resolve_reading`, built by datetime.combine,
        which is cheap where datetime.replace is not.
        """
        day = self.next_day(start.date())
        skip = bisect_left(self.times, start.time()) if day == start.date() else 0
        while day is not None:
            for moment, folded in self.pairs[skip:]:
                yield datetime.combine(day, moment, UTC), datetime.combine(day, folded, UTC)
            skip = 0
            try:
                day = self.next_day(day + ONE_DAY)
            except OverflowError:
                return


def _bad_cron(expression: str, reason: str) -> ScheduleError:
    return ScheduleError(f"invalid cron expression '{expression}': {reason}", value=expression)


#: A field ``plain_expansion`` takes: ``*`` or a list of numbers.
_PLAIN_FIELD = re.compile(r"\*|\d{1,2}(?:,\d{1,2})*")
#: Each field's smallest and largest number (a weekday's 7 is Sunday, as 0).
_BOUNDS = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))


def plain_expansion(fields: list[str]) -> list[list[int | str]] | None:
    """croniter's expansion of five fields that are each ``*`` or a list of numbers in
    range and not listing every value, made without croniter: sorted distinct numbers, a
    weekday 7 as 0, as croniter gives them. None for anything else (ranges, steps, names,
    L, W, #, ?, numbers out of range, a list of every value), which croniter expands and
    judges.

    Most schedules are this plain (``@daily``, ``30 6 * * 1``), and importing croniter
    costs a process tens of milliseconds (it starts a ``file`` subprocess to learn the
    interpreter's word size): every parse child paid it once per command."""
    expanded: list[list[int | str]] = []
    for text, (low, high) in zip(fields, _BOUNDS, strict=True):
        if not _PLAIN_FIELD.fullmatch(text):
            return None
        if text == "*":
            expanded.append(["*"])
            continue
        numbers = {int(value) for value in text.split(",")}
        if min(numbers) < low or max(numbers) > high:
            return None
        if high == 7:
            numbers = {n % 7 for n in numbers}
        if len(numbers) == (6 if high == 7 else high) - low + 1:
            return None  # every value: croniter's "*", or not, by what the other fields say
        expanded.append(sorted(numbers))
    return expanded


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
def compile_cron(expression: str, expansion: Expansion | None = None) -> CronSpec:
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
    spec = CronSpec(
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
    """croniter's expansion of the fields (and its nth-weekday map), validated field by field.
    Plain fields are expanded here (``plain_expansion``), with croniter's result."""
    plain = plain_expansion(fields)
    if plain is not None:
        return plain, {}
    from croniter import CroniterError, croniter

    _check_fields(expression, fields)
    try:
        return croniter.expand(" ".join(fields))
    except (CroniterError, ValueError, TypeError) as exc:
        raise _bad_cron(expression, _croniter_reason(exc)) from None

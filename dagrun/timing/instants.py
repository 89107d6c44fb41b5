"""Zones, instants and durations as users write them, and instants as machines read them.

Naive values are in the zone they are given with (a DAG's timezone); instants handed out are
aware UTC. Command-line dates follow DESIGN section 4: a date-only value means that local
day. ``iso`` is the one way dagrun writes an instant for machines (``--json``, the API).
"""

from __future__ import annotations

import math
import os
import re
from datetime import UTC, date, datetime, time, timedelta
from enum import Enum
from functools import lru_cache
from typing import NamedTuple, NewType, overload
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from dagrun.errors import ScheduleError

TICK = timedelta(microseconds=1)
ONE_DAY = timedelta(days=1)
_ISO_HINT = "expected an ISO 8601 date or datetime such as 2026-01-31 or 2026-01-31T02:30"


def get_zone(name: str | ZoneInfo) -> ZoneInfo:
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
    return resolve_wall(wall, tz).first


def as_utc(instant: datetime) -> datetime:
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
    unit = timedelta(seconds=1) if window >= timedelta(seconds=1) else TICK
    slots = window // unit
    if slots <= 0:
        return timedelta(0)
    import hashlib  # only a DAG with a spread pays for loading OpenSSL

    digest = hashlib.sha256(dag_id.encode("utf-8")).digest()
    return (int.from_bytes(digest[:8], "big") % slots) * unit


#: An instant as ``iso`` wrote it: a JSON document's field of this type can only be filled
#: by ``iso``, and the API's description says it is an RFC 3339 date-time.
Instant = NewType("Instant", str)


@overload
def iso(value: datetime) -> Instant: ...
@overload
def iso(value: None) -> None: ...
@overload
def iso(value: datetime | None) -> Instant | None: ...
def iso(value: datetime | None) -> Instant | None:
    """How dagrun writes an instant for machines (``--json``, the API, URLs): ISO 8601 in
    UTC with its offset, ``2026-01-01T05:00:00+00:00``; None stays None."""
    return Instant(value.astimezone(UTC).isoformat()) if value is not None else None


def local_iso(value: datetime, tz: ZoneInfo) -> Instant:
    """An instant in ISO 8601 at its offset in ``tz``, for the API's ``local_*`` fields."""
    return Instant(value.astimezone(tz).isoformat())


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
        last = wall_to_utc(datetime.combine(end_day + ONE_DAY, time()), tz) - TICK
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


# --- wall-clock time to instants, across daylight-saving changes ---------------------------


class Kind(Enum):
    NORMAL = "normal"
    REPEATED = "repeated"  # fall-back: the wall time happens twice
    SKIPPED = "skipped"  # spring-forward: the wall time never happens


class _Resolved(NamedTuple):
    kind: Kind
    first: datetime  # the (first) instant; for a skipped wall time, the end of the gap
    second: datetime | None  # the repeat, for a repeated wall time


def resolve_wall(wall: datetime, tz: ZoneInfo) -> _Resolved:
    """Classify naive wall time `wall` in `tz` and give its instants."""
    return resolve_reading(wall.replace(tzinfo=UTC), wall.replace(tzinfo=UTC, fold=1), tz)


def resolve_reading(reading: datetime, folded: datetime, tz: ZoneInfo) -> _Resolved:
    """Classify a local wall-clock reading; `folded` is the same reading with fold=1.

    Readings carry tzinfo=UTC only so that `reading - offset` is directly the aware instant:
    zone.utcoffset() reads the clock fields and fold, not the tzinfo. This avoids re-zoning
    datetimes (datetime.replace and astimezone), which dominated the cost of iterating.
    """
    early_offset = tz.utcoffset(reading)
    assert early_offset is not None  # a ZoneInfo gives every datetime an offset
    first = reading - early_offset
    late_offset = tz.utcoffset(folded)
    if late_offset == early_offset:
        return _Resolved(Kind.NORMAL, first, None)
    assert late_offset is not None
    second = reading - late_offset
    if first < second:
        return _Resolved(Kind.REPEATED, first, second)
    # PEP 495: in a gap fold=0 applies the old offset and fold=1 the new one, so the order
    # flips and the transition lies in (second, first].
    return _Resolved(Kind.SKIPPED, _transition_between(second, first, tz), None)


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


def hhmm(wall: datetime) -> str:
    return wall.strftime("%H:%M")


def local_text(instant: datetime, tz: ZoneInfo) -> str:
    return instant.astimezone(tz).strftime("%H:%M %Z")


# --- cron expressions ---------------------------------------------------------------------------


#: The environment variable that hands a task process the difference between the database's
#: clock and its host's, as its worker measured it (``store.clock.ClockWatch``).
OFFSET_ENV = "DAGRUN_CLOCK_OFFSET"


def decision_now() -> datetime:
    """The time that decides, where no transaction is at hand (a sensor's poke in a task
    process): this host's clock corrected by the difference its worker measured, so a
    sensor waiting for a time waits for the database's."""
    try:
        offset = float(os.environ.get(OFFSET_ENV) or 0.0)
    except ValueError:
        offset = 0.0
    return datetime.now(UTC) + timedelta(seconds=offset)

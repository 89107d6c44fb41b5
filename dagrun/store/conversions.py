"""How values cross between Python and each driver, as plain functions of the driver's
values: what a rendered statement needs besides its SQL and parameter order, so that a
process whose statements were all rendered (``rendered``) runs them without SQLAlchemy.

SQLAlchemy's types decide these conversions, once, when a statement is rendered
(``sql.Layout.of`` names each bind's and column's conversion here); what runs afterwards
is only this module. The conversions are SQLAlchemy's own, written out: an instant is
stored as SQLAlchemy stores a ``DateTime`` on each dialect (naive UTC text on SQLite, an
aware ``timestamptz`` on PostgreSQL), a boolean as 0 or 1 on SQLite, a float read as a
float whatever number type the server sent. ``tests/store/test_rendered.py`` checks every
statement of the store converts exactly as SQLAlchemy does, on both databases.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

Conversion = Callable[[Any], Any]

#: A UTC instant (``schema.UtcDateTime``): aware in Python.
INSTANT = "instant"
#: A ``DateTime`` without a zone (``now()``'s type).
DATETIME = "datetime"
BOOLEAN = "bool"
FLOAT = "float"

#: SQLite's text form of an instant, as SQLAlchemy's ``DATETIME`` stores it.
_SQLITE_TEXT = "%04d-%02d-%02d %02d:%02d:%02d.%06d"


def _sqlite_text(value: datetime) -> str:
    return _SQLITE_TEXT % (
        value.year,
        value.month,
        value.day,
        value.hour,
        value.minute,
        value.second,
        value.microsecond,
    )


def _utc(value: datetime) -> datetime:
    """An aware instant in UTC; a naive one is refused, as ``schema.UtcDateTime`` does."""
    if value.tzinfo is None:
        raise ValueError(f"naive datetime {value!r} cannot be stored; use an aware one")
    return value.astimezone(UTC)


def _as_bool(value: Any) -> int:
    if value not in (True, False):  # 0 and 1 are equal to False and True
        raise TypeError(f"Not a boolean value: {value!r}")
    return int(value)


def _read_utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _sqlite_instant(value: str) -> datetime:
    return datetime.fromisoformat(value).replace(tzinfo=UTC)


_BIND: dict[tuple[str, str], Conversion] = {
    ("sqlite", INSTANT): lambda v: _sqlite_text(_utc(v).replace(tzinfo=None)),
    ("sqlite", DATETIME): _sqlite_text,
    ("sqlite", BOOLEAN): _as_bool,
    ("sqlite", FLOAT): float,
    ("postgresql", INSTANT): _utc,
    ("postgresql", BOOLEAN): lambda v: bool(_as_bool(v)),
    ("postgresql", FLOAT): float,
}
_RESULT: dict[tuple[str, str], Conversion] = {
    ("sqlite", INSTANT): _sqlite_instant,
    ("sqlite", DATETIME): datetime.fromisoformat,
    ("sqlite", BOOLEAN): bool,
    ("postgresql", INSTANT): _read_utc,
    ("sqlite", FLOAT): float,
    ("postgresql", FLOAT): float,
}


def bind(dialect: str, kind: str | None) -> Conversion | None:
    """How a Python value of ``kind`` goes to the driver; None when it goes as it is."""
    return _none_safe(_BIND.get((dialect, kind))) if kind else None


def result(dialect: str, kind: str | None) -> Conversion | None:
    """How the driver's value of ``kind`` comes back; None when it comes as it is."""
    return _none_safe(_RESULT.get((dialect, kind))) if kind else None


def _none_safe(conversion: Conversion | None) -> Conversion | None:
    if conversion is None:
        return None

    def convert(value: Any) -> Any:
        return None if value is None else conversion(value)

    return convert

"""The grid's and run list's paging, parsed from the query string: bad values are a 400."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from dagrun.webapp.http import BadRequest

DEFAULT_RUNS_PER_PAGE = 25
MAX_RUNS_PER_PAGE = 100


@dataclass(frozen=True)
class Paging:
    """Which runs a grid shows: how many, and before which logical date."""

    runs: int
    before: datetime | None

    @classmethod
    def from_query(cls, query: dict[str, str]) -> Paging:
        return cls(_runs_param(query.get("runs")), _instant_param(query.get("before")))


def _runs_param(value: str | None) -> int:
    if value is None or value == "":
        return DEFAULT_RUNS_PER_PAGE
    if not re.fullmatch(r"[0-9]{1,6}", value):
        raise BadRequest(f"runs must be a whole number from 1 to {MAX_RUNS_PER_PAGE}")
    return min(max(int(value), 1), MAX_RUNS_PER_PAGE)


def _instant_param(value: str | None) -> datetime | None:
    """An ISO 8601 instant; a '+' decoded to a space by the query string is put back."""
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.strip().replace(" ", "+"))
        return parsed.astimezone(UTC) if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    except (ValueError, OverflowError):
        raise BadRequest("before must be an ISO 8601 instant, e.g. 2026-01-31T00:00:00Z") from None

"""How instants and durations are written on the pages and in the API."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from dagrun.states import TaskState


def local(value: datetime | None, tz: ZoneInfo, seconds: bool = False) -> str:
    if value is None:
        return "-"
    return value.astimezone(tz).strftime("%Y-%m-%d %H:%M:%S %Z" if seconds else "%Y-%m-%d %H:%M %Z")


def utc(value: datetime | None) -> str:
    return "-" if value is None else value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.2f}s" if seconds < 10 else f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


def live_duration(
    state: str, duration: float | None, start: datetime | None, now: datetime
) -> float | None:
    """The recorded duration; for a running task, how long it has been running so far."""
    if duration is None and state == TaskState.RUNNING.value and start is not None:
        return max(0.0, (now - start).total_seconds())
    return duration

"""Reading an attempt's log safely: named by (dag, run, task, try), never by a path from the URL.

The path the store recorded must resolve inside the logs folder, and only the tail of a huge
file is read (``Site.log_tail_bytes``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from dagrun.store import logfiles
from dagrun.webapp.http import Forbidden, NotFound


class LogSource(Protocol):
    """What recorded a log range: an attempt, or a callback (same column names)."""

    @property
    def log_path(self) -> str | None: ...

    @property
    def log_offset(self) -> int | None: ...

    @property
    def log_length(self) -> int | None: ...


@dataclass(frozen=True)
class LogText:
    """The tail of a log file, and how much of its head was left out."""

    path: Path
    text: str
    skipped_bytes: int


def read_log(attempt: LogSource, root: Path, tail_bytes: int) -> LogText:
    """The tail of an attempt's (or a callback's) log, only if its real path lies inside
    the logs folder.

    ``resolve()`` follows ``..`` and symbolic links first, so neither a crafted path in the
    store nor a link planted in the folder can reach a file outside it.
    """
    if not attempt.log_path:
        raise NotFound("no log file was recorded for it")
    path = Path(attempt.log_path).resolve()
    if not path.is_relative_to(root.resolve()):
        raise Forbidden("the recorded log file lies outside the logs folder")
    if not path.is_file():
        raise NotFound("the log file is not on this host")
    text, skipped = logfiles.read(
        str(path), attempt.log_offset, attempt.log_length, tail=tail_bytes
    )
    return LogText(path, text, skipped)

"""The log of an attempt that is still running, found on this host and read as it grows.

The store learns where an attempt's output lies (path, offset, length) only when it ends
(``statements.END_ATTEMPT``): writing it at the start too would cost every attempt a
transaction, and small tasks are many. While the attempt runs its output is the end of a
segment (``logfiles``): a worker child appends to a segment of its own, one attempt after
the other, and begins each with dagrun's line naming it, fence token included (here cut
in two)::

    2026-03-01 10:00:00,123 INFO dagrun.task: attempt 2 of shop.load[3]
        for 2026-03-01T00:00:00+00:00 (fence 7)

So the page finds it by that line: among the segments of the attempt's host written to since
it started, the one whose last attempt (or callback) line is this attempt's. It is found once
and remembered (``_FOUND``), so following it reads only the bytes that are new.

An offset is counted in bytes from the start of the attempt's output, the same in the
segment while it runs and in the range recorded when it ends (both start at its first
line), so a page following the log carries on across the end.
"""

from __future__ import annotations

import mmap
import os
import re
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from dagrun.store import Store, run_reads, task_reads
from dagrun.store.task_reads import AttemptRow
from dagrun.webapp.models import read_dag
from dagrun.webapp.values_view import task_instance_of

#: dagrun's line that starts an attempt's output, or a callback's, in a segment
#: (``attempt_logs.note``): a new start after the attempt's own ends its output.
_START = re.compile(
    rb"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO dagrun\.task: "
    rb"(?:attempt \d+ of .+ \(fence \d+\)|\w+ callback of .+)$",
    re.MULTILINE,
)
_MARK = b" INFO dagrun.task: "
#: How much earlier than the attempt's start (by the database's clock) a segment may have
#: been written to last and still hold it: the host's clock may be off by as much.
CLOCK_SLACK = timedelta(minutes=5)
#: Attempts whose output was found, remembered by the web process (oldest forgotten first).
REMEMBERED = 1024


@dataclass(frozen=True)
class LogChunk:
    """What an attempt's log holds from byte ``offset - len(text) - skipped`` on: ``text``,
    after ``skipped`` bytes left out (more than one answer carries); ``offset`` is where the
    next read starts. ``running`` is False once the attempt has ended; ``found`` says
    whether its output is on this host."""

    text: str
    offset: int
    skipped: int
    running: bool
    found: bool


@dataclass(frozen=True)
class _Start:
    """Where a running attempt's output starts: a segment and the offset of its first line."""

    path: str
    offset: int


class _Remembered:
    """The starts found, by (logs folder, task instance, fence token); thread-safe."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._found: dict[tuple[str, int, int], _Start] = {}
        self._lock = threading.Lock()

    def get(self, key: tuple[str, int, int]) -> _Start | None:
        with self._lock:
            return self._found.get(key)

    def put(self, key: tuple[str, int, int], start: _Start) -> None:
        with self._lock:
            self._found[key] = start
            while len(self._found) > self._size:
                del self._found[next(iter(self._found))]

    def forget(self, key: tuple[str, int, int]) -> None:
        with self._lock:
            self._found.pop(key, None)


_FOUND = _Remembered(REMEMBERED)


@dataclass(frozen=True)
class AttemptName:
    """How dagrun's first line names an attempt: ``attempt 2 of shop.load[3] for ...``."""

    dag_id: str
    task_id: str
    map_index: int

    def header(self, attempt: AttemptRow) -> re.Pattern[bytes]:
        index = f"[{self.map_index}]" if self.map_index >= 0 else ""
        named = f"attempt {attempt.try_number} of {self.dag_id}.{self.task_id}{index} for "
        return re.compile(
            rb"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO dagrun\.task: "
            + re.escape(named.encode())
            + rb"\S+ \(fence "
            + str(attempt.fence_token).encode()
            + rb"\)$"
        )


def follow(attempt: AttemptRow, name: AttemptName, root: Path, since: int, most: int) -> LogChunk:
    """What ``attempt``'s log holds after byte ``since`` (at most ``most`` bytes: the last
    ones when more were written): read from the range recorded once it has ended, else
    from the segment it is being written to, in whole lines."""
    key = (str(root), attempt.ti_id, attempt.fence_token)
    if attempt.ended_at is not None:
        _FOUND.forget(key)
        path = _inside(attempt.log_path, root)
        if path is None:
            return LogChunk("", since, 0, running=False, found=False)
        recorded = _Start(path, attempt.log_offset or 0)
        end = recorded.offset + attempt.log_length if attempt.log_length is not None else None
        return _chunk(recorded, end, since, most, running=False)
    start = _FOUND.get(key) or _locate(attempt, name, root)
    if start is None:
        return LogChunk("", since, 0, running=True, found=False)
    _FOUND.put(key, start)
    return _chunk(start, None, since, most, running=True)


def read_tail(
    store: Store,
    root: Path,
    ids: tuple[str, str, str, int],
    map_index: int | None,
    since: int,
    most: int,
) -> LogChunk:
    """``follow`` for the attempt that ``ids`` (DAG, run, task, try number) and
    ``map_index`` name: a 404 for any that is not known."""
    dag_id, run_id, task_id, try_number = ids
    with store.read() as conn:
        read_dag(store, conn, dag_id)
        run = run_reads.run_by_id(conn, dag_id, run_id)
        instance = task_instance_of(conn, run, task_id, map_index)
        attempt = task_reads.attempt(conn, dag_id, run.id, task_id, try_number, instance.id)
    name = AttemptName(dag_id, task_id, instance.map_index)
    return follow(attempt, name, root, since, most)


def _inside(path: str | None, root: Path) -> str | None:
    """The recorded path, if there is one and it resolves inside the logs folder: a path
    in the store never reaches a file outside it (as ``logs.read_log``)."""
    if not path:
        return None
    resolved = Path(path).resolve()
    return str(resolved) if resolved.is_relative_to(root.resolve()) else None


def _chunk(start: _Start, end: int | None, since: int, most: int, *, running: bool) -> LogChunk:
    data, skipped = _read(start, end, since, most)
    if running:
        data = _own_part(data, first=since + skipped == 0)
        data = _whole_lines(data, most)
    return LogChunk(
        data.decode("utf-8", "replace"),
        since + skipped + len(data),
        skipped,
        running=running,
        found=True,
    )


def _read(start: _Start, end: int | None, since: int, most: int) -> tuple[bytes, int]:
    """The bytes from ``start.offset + since`` to ``end`` (the file's end when None), at
    most ``most`` of them: the last ones, and how many were skipped before them."""
    try:
        with open(start.path, "rb") as handle:
            stop = end if end is not None else os.fstat(handle.fileno()).st_size
            begin = start.offset + since
            available = max(0, stop - begin)
            if available == 0:  # an offset far past the end is no place to seek to
                return b"", 0
            skipped = max(0, available - most)
            handle.seek(begin + skipped)
            return handle.read(available - skipped), skipped
    except FileNotFoundError:  # removed by `dagrun db clean` meanwhile
        return b"", 0


def _own_part(data: bytes, *, first: bool) -> bytes:
    """The attempt's own output: up to the next attempt's (or callback's) first line, which
    its child writes next once it has ended (the store may not know yet). ``first``: the
    data begins with the attempt's own first line, which is no later start."""
    later = _START.search(data, 1 if first else 0)
    return data if later is None else data[: later.start()]


def _whole_lines(data: bytes, most: int) -> bytes:
    """Up to the last line break: a line still being written comes with the next read,
    unless it alone fills a read (then up to its last whole UTF-8 character)."""
    cut = data.rfind(b"\n") + 1
    if cut or len(data) < most:
        return data[:cut]
    return data[: _whole_characters(data)]


def _whole_characters(data: bytes) -> int:
    """The length of ``data`` without the bytes of a character it only begins."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # not a continuation byte: a character starts here
            need = 1 if byte < 0x80 else 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return len(data) if back >= need else len(data) - back
    return len(data)


def _locate(attempt: AttemptRow, name: AttemptName, root: Path) -> _Start | None:
    """The segment a running attempt is written to, and where in it its output starts."""
    header = name.header(attempt)
    for path in _candidates(attempt, root):
        offset = _last_start(path)
        if offset is not None and header.match(_line_at(path, offset)):
            return _Start(path, offset)
    return None


def _candidates(attempt: AttemptRow, root: Path) -> list[str]:
    """The segments of the attempt's host under ``root`` (the day folders around its start)
    written to since it started, the most recently written first."""
    # A worker is named host:pid:nonce and its children's segments host-pid-n.log.
    prefix = attempt.worker.split(":", 1)[0] + "-" if ":" in attempt.worker else ""
    since = (attempt.started_at - CLOCK_SLACK).timestamp()
    found: list[tuple[float, str]] = []
    for day in _days_around(attempt.started_at):
        try:
            entries = list(os.scandir(root / day))
        except OSError:  # no such day folder
            continue
        for entry in entries:
            if not entry.name.endswith(".log") or not entry.name.startswith(prefix):
                continue
            if not entry.is_file(follow_symlinks=False):
                continue
            modified = entry.stat(follow_symlinks=False).st_mtime
            if modified >= since:
                found.append((modified, entry.path))
    return [path for _, path in sorted(found, reverse=True)]


def _days_around(instant: datetime) -> list[str]:
    """The UTC day folders a segment opened at ``instant`` may be in (the host's clock may
    have been across midnight from the database's)."""
    return [(instant + timedelta(days=d)).strftime("%Y-%m-%d") for d in (0, -1, 1)]


def _last_start(path: str) -> int | None:
    """The offset of the segment's last attempt (or callback) line: the output its child is
    writing now. Searched from the end, so it costs that output's size, not the segment's."""
    try:
        with open(path, "rb") as handle:
            if os.fstat(handle.fileno()).st_size == 0:
                return None
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
                position = data.rfind(_MARK)
                while position >= 0:
                    line_start = data.rfind(b"\n", 0, position) + 1
                    line_end = data.find(b"\n", position)
                    line = data[line_start : line_end if line_end >= 0 else len(data)]
                    if _START.fullmatch(line):
                        return line_start
                    position = data.rfind(_MARK, 0, line_start)
    except (OSError, ValueError):  # gone, or emptied while it was mapped
        return None
    return None


def _line_at(path: str, offset: int) -> bytes:
    """The line of ``path`` that starts at ``offset``."""
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            return handle.readline(4096).rstrip(b"\n")
    except OSError:
        return b""

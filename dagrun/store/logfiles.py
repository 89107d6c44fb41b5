"""Attempt logs: append-only segment files, one writer each, read back by byte range.

A worker child appends the output of every attempt it runs to its current segment,
``<logs>/<UTC day>/<host>-<pid>-<n>.log``, one attempt after the other, and reports where
each attempt's output starts and how long it is; the store keeps (path, offset, length) per
attempt, and ``dagrun logs`` and the web page read exactly that range. A file per attempt
cost more than running a small task (creating a file is about a quarter of a millisecond of
kernel time here, appending two microseconds) and a big backfill left millions of inodes.
A segment is left for a new one once it passes ``SEGMENT_BYTES`` or the day changes, so old
logs are removed a day folder at a time. Every attempt starts with dagrun's own line naming
the DAG, task, date and try, so ``grep`` over the folder still finds things.
"""

from __future__ import annotations

import contextlib
import glob
import os
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

SEGMENT_BYTES = 64 * 1024 * 1024
_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC


@dataclass(frozen=True)
class LogRange:
    """Where one attempt's output lies: ``length`` bytes of ``path`` from ``offset``."""

    path: str
    offset: int
    length: int


class Segment:
    """The file this process appends attempts to, under ``folder``."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.path: str | None = None
        self.fd: int | None = None
        self._day = ""
        self._count = 0

    def start(self) -> int:
        """Make sure a current segment is open (a new one past the size or the day); the
        offset where the next attempt's output begins."""
        day = time.strftime("%Y-%m-%d", time.gmtime())
        offset = self.end() if self.fd is not None else 0
        if self.fd is None or offset >= SEGMENT_BYTES or day != self._day or self._gone():
            self._open(day)
            offset = self.end()
        return offset

    def _gone(self) -> bool:
        """Someone removed the file (or its folder): what is appended now would be lost."""
        assert self.fd is not None  # asked only of an open segment
        return os.fstat(self.fd).st_nlink == 0

    def end(self) -> int:
        assert self.fd is not None  # asked only of an open segment
        return os.lseek(self.fd, 0, os.SEEK_END)

    def _open(self, day: str) -> None:
        """A new segment: a file this process creates, never one it finds (an earlier
        process with the same pid may have left one), so each segment has one writer."""
        if self.fd is not None:
            os.close(self.fd)
        self._day = day
        folder = os.path.join(self.folder, day)
        os.makedirs(folder, exist_ok=True)
        while True:
            self._count += 1
            self.path = os.path.join(folder, f"{_owner(os.getpid())}-{self._count}.log")
            try:
                self.fd = os.open(self.path, _FLAGS | os.O_EXCL, 0o644)
                return
            except FileExistsError:
                continue


_segments: dict[str, tuple[int, Segment]] = {}


def segment(folder: str) -> Segment:
    """This process's segment under ``folder`` (a forked child makes its own)."""
    pid = os.getpid()
    found = _segments.get(folder)
    if found is None or found[0] != pid:
        found = _segments[folder] = (pid, Segment(folder))
    return found[1]


def _owner(pid: int) -> str:
    return f"{socket.gethostname()}-{pid}"


def tail_of(folder: str, pid: int, after: LogRange | None) -> LogRange | None:
    """What process ``pid`` wrote after ``after`` (its last reported attempt): the log of an
    attempt it died in. Its newest segment holds it, from ``after``'s end if that is the
    same file, else from the start."""
    paths = glob.glob(os.path.join(glob.escape(folder), "*", f"{_owner(pid)}-*.log"))
    if not paths:
        return None
    path = max(paths, key=_number)
    offset = after.offset + after.length if after is not None and after.path == path else 0
    return LogRange(path, offset, max(0, os.path.getsize(path) - offset))


def _number(path: str) -> int:
    """A process numbers its segments in the order it opens them."""
    number = os.path.basename(path).rsplit("-", 1)[-1].removesuffix(".log")
    return int(number) if number.isdigit() else 0


def read(path: str, offset: int | None, length: int | None, tail: int | None = None):
    """The text of one attempt's range (the whole file for a log recorded without one), at
    most its last ``tail`` bytes; returns (text, bytes skipped at the start)."""
    with open(path, "rb") as handle:
        start = offset or 0
        size = length if length is not None else os.fstat(handle.fileno()).st_size - start
        skipped = max(0, size - tail) if tail is not None else 0
        handle.seek(start + skipped)
        data = handle.read(size - skipped)
    return data.decode("utf-8", "replace"), skipped


# ---------------------------------------------------------------- removing segments


@dataclass
class Removal:
    """What ``remove_segments`` removed (or would), and what it left."""

    files: int = 0
    bytes: int = 0
    #: Segments a writer may still append to, or written too recently.
    open: int = 0
    #: Files named that are not on this host.
    absent: int = 0


def remove_segments(paths: Iterable[str], *, quiet: float, dry_run: bool = False) -> Removal:
    """Remove the given segments (count them only, on a dry run), then the day folders they
    leave empty. A segment still open to its writer, or written less than ``quiet`` seconds
    ago (a range is recorded a moment after its output), or not on this host, is counted
    and left."""
    removal = Removal()
    folders: set[str] = set()
    for path in sorted(paths):
        if not path.endswith(".log"):
            continue
        try:
            stat = os.stat(path)
        except FileNotFoundError:
            removal.absent += 1
            continue
        if time.time() - stat.st_mtime < quiet or writer_active(path):
            removal.open += 1
            continue
        if not dry_run:
            try:
                os.remove(path)
            except FileNotFoundError:
                continue
            folders.add(os.path.dirname(path))
        removal.files += 1
        removal.bytes += stat.st_size
    for folder in folders:
        _remove_day_folder(folder)
    return removal


def writer_active(path: str) -> bool:
    """Whether the process that wrote this segment may still append to it: it has opened no
    newer segment and is alive on this host (or on another host, where we cannot tell).
    A file not named as a segment (``<host>-<pid>-<n>.log``) was written once."""
    parts = os.path.basename(path).removesuffix(".log").rsplit("-", 2)
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        return False
    host, pid = parts[0], int(parts[1])
    logs = os.path.dirname(os.path.dirname(path))
    pattern = os.path.join(glob.escape(logs), "*", glob.escape(f"{host}-{pid}-") + "*.log")
    if any(_number(other) > _number(path) for other in glob.glob(pattern)):
        return False  # it moved on: a process never goes back to an older segment
    if host != socket.gethostname():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_day_folder(folder: str) -> None:
    """Remove an emptied day folder, unless a writer may still make a segment in it (today's
    and yesterday's, by UTC day)."""
    name = os.path.basename(folder)
    yesterday = (datetime.now(UTC) - timedelta(days=1)).strftime("%Y-%m-%d")
    if len(name) != 10 or name >= yesterday:
        return
    with contextlib.suppress(OSError):  # not empty, or gone already
        os.rmdir(folder)

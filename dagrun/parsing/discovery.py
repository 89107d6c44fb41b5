"""Which DAG files a folder holds, and what tells an unchanged one without reading it.

A sync that reads and hashes every file pays for all of them each time; a file's size and
modification time (in nanoseconds) change whenever it is written, so, as ``make``,
``rsync`` and Python's own bytecode cache do, a file whose ``Stat`` is the one recorded
with its last hash is taken as unchanged, and only the others are read and hashed. A
modification time is only as fine as the file system's clock (one tick, up to two seconds
on some), so an edit of the same size within the tick of the write before it keeps its
time: a stat is trusted only once its file is older than that (``settled``), as git
treats "racily clean" files; a younger file is hashed at each sync until it settles.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

#: How long after its last write a file's stat is trusted to tell the next edit: the
#: coarsest clock of a common file system (FAT's two seconds; ext4's tick is milliseconds).
SETTLE_NS = 2_000_000_000


class Stat(NamedTuple):
    """What a file's ``os.stat`` says of its content: its size and modification time."""

    size: int
    mtime_ns: int


def python_files(folder: str | os.PathLike) -> Iterator[str]:
    """The absolute paths of the ``*.py`` files below ``folder`` (hidden folders and caches
    skipped), in a stable order."""
    root = Path(folder)
    if not root.is_dir():
        return
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "__")))
        for name in sorted(filenames):
            if name.endswith(".py") and not name.startswith("."):
                yield os.path.abspath(os.path.join(dirpath, name))


def stats(folder: str | os.PathLike) -> dict[str, Stat]:
    """Every ``*.py`` below ``folder`` -> its ``Stat`` (a file removed meanwhile is left out)."""
    found = {}
    for path in python_files(folder):
        try:
            st = os.stat(path)
        except FileNotFoundError:
            continue
        found[path] = Stat(st.st_size, st.st_mtime_ns)
    return found


def settled(stat: Stat, now_ns: int) -> bool:
    """Whether a stat taken at ``now_ns`` (``time.time_ns()``) will tell the file's next
    edit: its modification time is past the clock tick of any write still to come."""
    return stat.mtime_ns <= now_ns - SETTLE_NS


def file_hash(path: str) -> str:
    """The hash a file's content is recorded by (and its parse is kept for)."""
    import hashlib  # only a file whose stat changed is read and hashed

    with open(path, "rb") as handle:
        return hashlib.sha1(handle.read()).hexdigest()

"""An attempt's log: fds 1 and 2, ``sys.stdout``/``sys.stderr`` and Python logging sent to
the child's log segment for the length of one attempt, and dagrun's own lines in it.

Apart from the runner because the callback runner captures a callback event's output the
same way, and because the redirection and its restoring are a concern of their own: the
child runs many attempts, so everything pointed at the segment is put back after each.
"""

from __future__ import annotations

import contextlib
import errno
import faulthandler
import functools
import logging
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TextIO

from dagrun.runtime.masking import Masker, MaskingWriter
from dagrun.store import logfiles
from dagrun.store.logfiles import LogRange


def log_folder_problem(exc: OSError) -> str:
    """What an error writing the log says about the log folder, in a few words."""
    problems: dict[int | None, str] = {
        errno.ENOSPC: "log folder full",
        errno.EDQUOT: "log folder over its quota",
        errno.EROFS: "log folder read-only",
        errno.EACCES: "log folder not writable",
        errno.EPERM: "log folder not writable",
    }
    return problems.get(exc.errno, "log folder unusable")


def note(level: str, message: str) -> None:
    """dagrun's own lines in the attempt log, in the logging format but without its cost
    (this runs twice per attempt, and small tasks are many)."""
    now = time.time()
    sys.stderr.write(
        f"{_stamp(int(now))},{int(now % 1 * 1000):03d} {level} dagrun.task: {message}\n"
    )


@functools.lru_cache(maxsize=1)
def _stamp(second: int) -> str:
    """The local time of a whole second, formatted once: both lines of a short attempt, and
    the attempts after it, fall in the same second."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(second))


@contextlib.contextmanager
def captured(log_dir: str | None, masker: Masker | None = None) -> Iterator[list[LogRange]]:
    """Send fds 1 and 2, ``sys.stdout``/``sys.stderr`` and Python logging to this process's
    log segment under ``log_dir``, then restore them all (the child runs many attempts);
    the streams and logging through ``masker`` once it knows a secret (``_watch``).
    The list it yields holds the attempt's range of the segment once the block is over."""
    log: list[LogRange] = []
    if log_dir is None:
        yield log
        return
    target = _fd2_target()
    saved_streams = sys.stdout, sys.stderr
    root = logging.getLogger()
    level = root.level
    sys.stdout.flush()
    sys.stderr.flush()
    segment = logfiles.segment(log_dir)
    offset = segment.start()
    assert segment.fd is not None and segment.path is not None  # start() opened it
    saved_fds = _redirect_fds(segment.fd)
    try:
        sys.stdout = sys.stderr = target.stream
        # On fd 2, not on the segment, so it stays valid after the attempt and is left on:
        # a segfault's traceback goes to whatever fd 2 is, this attempt's log while it runs.
        # Enabled every time (under a microsecond) in case a task turned it off or moved it.
        faulthandler.enable(file=2)
        root.addHandler(target.handler)
        _set_level(root, min(level, logging.INFO) if level else logging.INFO)
        if masker is not None:
            _watch(target, masker)
        yield log
    finally:
        if masker is not None:
            _unwatch(target, masker)
        if not target.stream.closed:  # a task may close sys.stdout; _fd2_target replaces it
            with contextlib.suppress(OSError):  # a full disk: what was written stays
                target.stream.flush()
        sys.stdout, sys.stderr = saved_streams
        root.removeHandler(target.handler)
        _set_level(root, level)
        _restore_fds(saved_fds)
        log.append(LogRange(segment.path, offset, segment.end() - offset))


def _watch(target: _Fd2Target, masker: Masker) -> None:
    """Write ``sys.stdout``, ``sys.stderr`` and the log handler through ``masker`` from the
    moment it knows a secret: at once, or when the task fetches its first. An attempt with
    none keeps the plain stream, and its BashTask writes to the log directly."""

    def mask_streams() -> None:
        if not isinstance(target.handler.stream, MaskingWriter):
            writer = MaskingWriter(target.stream, masker)
            sys.stdout = sys.stderr = writer
            target.handler.setStream(writer)

    masker.on_known = mask_streams
    if masker:
        mask_streams()


def _unwatch(target: _Fd2Target, masker: Masker) -> None:
    """Undo ``_watch``; what the masking writer still holds (a line not ended) is written."""
    masker.on_known = None
    writer = target.handler.stream
    if isinstance(writer, MaskingWriter):
        target.handler.stream = target.stream
        if not target.stream.closed:
            with contextlib.suppress(OSError):
                writer.flush()


def _redirect_fds(fd: int) -> tuple[int, int]:
    """Point fds 1 and 2 at ``fd``; returns copies of what they were."""
    saved = os.dup(1), os.dup(2)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    return saved


def _restore_fds(saved: tuple[int, int]) -> None:
    for target, fd in enumerate(saved, start=1):
        os.dup2(fd, target)
        os.close(fd)


@dataclass(frozen=True)
class _Fd2Target:
    """A text stream on fd 2 and a logging handler writing to it. Made once per process:
    every attempt points fd 2 at its log segment, so the same stream and handler serve all
    of them, where building both per attempt was much of a small attempt's cost."""

    stream: TextIO
    handler: logging.StreamHandler[TextIO | MaskingWriter]  # the stream, or it masked


_target: _Fd2Target | None = None


def _fd2_target() -> _Fd2Target:
    global _target
    if _target is None or _target.stream.closed:
        stream = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115 - lives on
        handler: logging.StreamHandler[TextIO | MaskingWriter] = logging.StreamHandler(stream)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        _target = _Fd2Target(stream, handler)
    return _target


def _set_level(logger: logging.Logger, level: int) -> None:
    """``setLevel`` clears the cache of every logger, so only when the level changes (a
    worker started with INFO logging leaves it unchanged across all its attempts)."""
    if logger.level != level:
        logger.setLevel(level)

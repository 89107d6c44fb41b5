"""Parsing DAG files in child processes (``discovery`` finds them, ``loader`` imports them).

Each file is imported in a forked child process under a module name of its own, with its
folder importable for helper modules, so a file that crashes, hangs or pollutes
``sys.modules`` cannot hurt the caller or the other files. The child imports one file at a
time and answers per file; if a file does not finish within the time limit the child is
killed, the file is reported, and a fresh child carries on with the rest.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dagrun import processes, settings
from dagrun.errors import DagFileError
from dagrun.parsing.discovery import file_hash, python_files

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from dagrun.parsing.spec import DagSpec, FileWarning

DEFAULT_TIMEOUT: float = settings.get("core.parse_timeout")
#: A file still importing after this long (or half its time limit, if that is shorter) is
#: named on the log, so a command that waits for it does not wait in silence.
NOTICE_AFTER = 5.0

log = logging.getLogger("dagrun.parsing")


@dataclass
class FileResult:
    """What importing one file produced: its DAGs, or the reason it failed."""

    path: str
    content_hash: str
    dags: list[DagSpec] = field(default_factory=list)
    error: DagFileError | None = None
    depends_on: tuple[str, ...] = ()  # files (outside Python's own) its import loaded
    #: What its DAGs accepted without acting on (``loader.LoadedFile.warnings``).
    warnings: tuple[FileWarning, ...] = ()


def discover(folder: str | os.PathLike) -> dict[str, str]:
    """Every ``*.py`` below ``folder`` (hidden folders and caches skipped) -> content hash."""
    return {path: file_hash(path) for path in python_files(folder)}


def _child(conn: Connection) -> None:
    """Parse worker: import what building specs needs, then each path it is sent in turn,
    sending (path, specs, error, helpers, warnings) for each. Its output goes nowhere, and
    its memory is capped (``DAGRUN_PARSE_MEMORY_MB``)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    # Imported here, after the fork: a spare child loads the authoring API while its parent
    # goes on with the store.
    from dagrun.parsing import loader

    loader.limit_memory()
    try:
        paths = conn.recv()
    except EOFError:
        return
    for path in paths:
        with loader.isolated(path) as helpers:
            specs, error, warnings = loader.load(path)
        reason = (error.reason, error.line) if error else None
        conn.send((path, [s.to_json() for s in specs], reason, helpers, warnings))


class _ParseChild(processes.ForkedChild):
    """A child importing a list of files in order; the parent times each file. It dies with
    the process that forked it, and ``kill`` takes its process group down: whatever a DAG
    file started at import ends too."""

    def __init__(self) -> None:
        super().__init__(_child)
        self.paths: list[str] = []
        self.timeout = DEFAULT_TIMEOUT
        self.deadline = self.notice_at = float("inf")

    def start(self, paths: list[str], timeout: float) -> _ParseChild:
        self.paths, self.timeout = paths, timeout
        self._next_file()
        self.conn.send(paths)
        return self

    def _next_file(self) -> None:
        """The clocks of the file the child imports now: its limit, and when to name it."""
        now = time.monotonic()
        self.deadline = now + self.timeout
        self.notice_at = now + min(NOTICE_AFTER, self.timeout / 2)

    @property
    def current(self) -> str:
        return self.paths[0]

    def receive(self, hashes: dict[str, str]) -> tuple[FileResult, bool]:
        """The current file's result, and whether the child lives on (it may have died)."""
        path = self.paths.pop(0)
        self._next_file()
        try:
            _, specs, reason, helpers, warnings = self.conn.recv()
        except EOFError:
            error = DagFileError(path, f"import killed the parser ({self.exit_reason()})")
            return FileResult(path, hashes[path], error=error), False
        # Imported at the first result: the children are forked before it (``prefork``).
        from dagrun.parsing.spec import DagSpec, FileWarning

        failure = DagFileError(path, *reason) if reason else None
        specs = [DagSpec.from_wire(s) for s in specs]
        found = tuple(FileWarning(*w) for w in warnings)
        return FileResult(path, hashes[path], specs, failure, tuple(helpers), found), True

    def time_out(self, hashes: dict[str, str]) -> FileResult:
        path = self.paths.pop(0)
        error = DagFileError(path, f"import did not finish within {self.timeout:g} s")
        return FileResult(path, hashes[path], error=error)


def parse_files(
    paths: dict[str, str], timeout: float = DEFAULT_TIMEOUT, processes: int | None = None
) -> dict[str, FileResult]:
    """Import each file (path -> content hash) in child processes; never hangs past ``timeout``
    per file. Files are shared round-robin among up to ``processes`` children (default: the
    number of cores, at most 4); a child that crashes or hangs on a file is replaced. A file
    still importing after a few seconds is named on the log (``NOTICE_AFTER``)."""
    from multiprocessing import connection  # only a parse needs it, not every command

    ordered = sorted(paths)
    count = max(1, min(processes, len(ordered))) if processes else _share_count(len(ordered))
    children = [_child_for(ordered[i::count], timeout) for i in range(count) if ordered[i::count]]
    _drop_spares()
    results: dict[str, FileResult] = {}
    try:
        while children:
            wake = min(min(c.deadline, c.notice_at) for c in children)
            ready = set(
                connection.wait(
                    [c.conn for c in children], timeout=max(0.0, wake - time.monotonic())
                )
            )
            for child in list(children):
                if child.conn in ready:
                    result, alive = child.receive(paths)
                elif time.monotonic() >= child.deadline:
                    result, alive = child.time_out(paths), False
                else:
                    continue
                results[result.path] = result
                if alive and child.paths:
                    continue
                child.kill()
                children.remove(child)
                if child.paths:
                    children.append(_ParseChild().start(child.paths, timeout))
            _name_slow_files(children)
    finally:
        for child in children:
            child.kill()
    return results


def _name_slow_files(children: list[_ParseChild]) -> None:
    """Say, once per file, which files have been importing past their notice time."""
    now = time.monotonic()
    slow = [c for c in children if c.notice_at <= now]
    if slow:
        for child in slow:
            child.notice_at = float("inf")  # named: not again before its next file
        log.warning(
            "waiting for %s to import (a file fails after %g s: DAGRUN_PARSE_TIMEOUT)",
            ", ".join(c.current for c in slow),
            slow[0].timeout,
        )


_spares: list[_ParseChild] = []


def prefork(folder: str | os.PathLike) -> None:
    """Start parsing every file of ``folder`` now, before this process imports the store:
    the command's store is not made yet, so its first sync parses every file, and the
    children's imports and parses then overlap the parent's making of the store on the
    other cores. As many children as a parse of ``folder`` uses, each with the share
    ``parse_files`` gives it, which takes their results when it asks for the same files
    (else they are killed and it forks its own). Unused, they end with this process."""
    if _spares:
        return
    ordered = list(python_files(folder))
    count = _share_count(len(ordered)) if ordered else 0
    _spares.extend(_ParseChild().start(ordered[i::count], DEFAULT_TIMEOUT) for i in range(count))


def _share_count(files: int | None = None) -> int:
    """Children a parse uses: one per core, at most 4, and no more than there are files."""
    count = min(os.cpu_count() or 1, 4)
    return count if files is None else max(1, min(count, files))


def _child_for(paths: list[str], timeout: float) -> _ParseChild:
    """The child ``prefork`` started on these very paths (its results may be waiting in
    the pipe, a file's crash among them), now timed by ``timeout``; else a new child."""
    for child in _spares:
        if child.paths == paths and child.parent == os.getpid():
            _spares.remove(child)
            child.timeout = timeout
            child._next_file()
            return child
    return _ParseChild().start(paths, timeout)


def _drop_spares() -> None:
    """Kill the children started ahead that this parse did not take (other files)."""
    while _spares:
        child = _spares.pop()
        if child.parent == os.getpid():
            child.kill()

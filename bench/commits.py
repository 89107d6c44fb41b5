"""Counting the SQLite commits of a command's whole process tree, from outside dagrun.

dagrun has no commit counter of its own, and the bench must not add one to it, so the count
is taken at the driver: this file is copied as ``sitecustomize.py`` into a folder that
``PYTHONPATH`` puts first, so that every Python process of the command (the CLI, its forked
worker and parse children, and any interpreter it starts) wraps ``sqlite3.connect`` before
dagrun runs. Each connection gets a trace callback (``set_trace_callback``: SQLite reports
every statement it runs, ``COMMIT`` included, whether it came from ``commit()`` or a
cursor). A commit counts when its transaction changed at least one row
(``total_changes`` moved since the last commit): a read transaction's ``COMMIT`` writes
nothing, and a statement in autocommit mode that changed rows is a commit of its own. Each
commit appends its process id as one line to the file ``LOG_VARIABLE`` names (``O_APPEND``:
processes never interleave, and a child that ends with ``os._exit`` loses nothing).

What it does not see: schema changes (``CREATE``, ``ALTER``: not counted in
``total_changes``; measure on a store whose schema exists) and a connection's last
autocommit write when no statement follows it (settled at the next statement). dagrun
writes in explicit ``BEGIN IMMEDIATE`` transactions, so neither applies to its runs.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import weakref
from pathlib import Path

#: The environment variable naming the commit log; nothing is counted without it.
LOG_VARIABLE = "BENCH_COMMIT_LOG"


class CommitTracer:
    """One connection's trace callback: appends a line to ``log`` per commit that wrote."""

    def __init__(self, conn: sqlite3.Connection, log: str) -> None:
        self.conn = weakref.ref(conn)  # the connection holds this callback: no cycle
        self.log = log
        self.mark = 0

    def __call__(self, statement: str) -> None:
        conn = self.conn()
        if conn is None:
            return
        words = statement.upper().split()
        verb = words[0] if words else ""
        changes = conn.total_changes
        if verb == "ROLLBACK" and "TO" not in words:
            self.mark = changes
            return
        if verb in ("COMMIT", "END") or not conn.in_transaction:
            if changes > self.mark:
                self.record()
            self.mark = changes

    def record(self) -> None:
        fd = os.open(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, b"%d\n" % os.getpid())
        finally:
            os.close(fd)


@functools.cache
def weakly_referenced(factory: type[sqlite3.Connection]) -> type[sqlite3.Connection]:
    """A subclass of ``factory``, as a Python class able to be weakly referenced (the
    driver's own class is not), so that a connection and its tracer make no cycle."""
    return type(factory.__name__, (factory,), {})


def install() -> None:
    """Trace every SQLite connection this process opens from now on, when the log is named."""
    log = os.environ.get(LOG_VARIABLE)
    if not log:
        return
    connect = sqlite3.connect

    def traced_connect(*args, factory=sqlite3.Connection, **kwargs) -> sqlite3.Connection:
        conn = connect(*args, factory=weakly_referenced(factory), **kwargs)
        conn.set_trace_callback(CommitTracer(conn, log))
        return conn

    # SQLAlchemy's dialect calls ``sqlite3.dbapi2.connect``; code of its own, ``sqlite3.connect``.
    sqlite3.connect = sqlite3.dbapi2.connect = traced_connect


def site_folder(folder: Path) -> Path:
    """``folder`` holding this file as ``sitecustomize.py``: put it first on ``PYTHONPATH``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(Path(__file__).read_text())
    return folder


def commits_by_process(log: Path) -> dict[int, int]:
    """The commits the log recorded, per process id."""
    counts: dict[int, int] = {}
    if log.exists():
        for line in log.read_text().split():
            counts[int(line)] = counts.get(int(line), 0) + 1
    return counts


if __name__ == "sitecustomize":
    install()

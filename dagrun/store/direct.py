"""SQLite on Python's own driver, without SQLAlchemy: how a command talks to the embedded
store once every statement it runs is rendered (``rendered``).

Importing SQLAlchemy costs a command more than everything dagrun does in a one-task run, and
a command needs none of it to run SQL it rendered in an earlier process: it needs a
connection set up as ``engine`` sets up SQLite (WAL, ``synchronous``, foreign keys, a busy
timeout), a transaction (``BEGIN IMMEDIATE`` for a writer, so two writers serialise at the
start), and the driver's cursor, which ``sql`` runs every statement on either way. So a
``Store`` of a SQLite file opened with ``direct=True`` keeps one such connection per thread
and process, here, and SQLAlchemy's engine only for creating or migrating the schema.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple


class Dialect(NamedTuple):
    """What ``sql`` asks of a connection's dialect: its name."""

    name: str


SQLITE = Dialect("sqlite")
_TABLES = "SELECT name FROM sqlite_schema WHERE type = 'table'"


class DirectConnection:
    """One transaction on a driver connection, as ``sql`` runs statements on it."""

    dialect = SQLITE

    def __init__(self, driver: sqlite3.Connection, url: str) -> None:
        self.driver = driver
        #: The store's URL (what messages name).
        self.url = url
        self.detached = False

    def detach(self) -> None:
        """Close the connection when the transaction ends instead of keeping it (what a
        process that reads once in a while asks, as of SQLAlchemy's connections)."""
        self.detached = True

    @property
    def total_changes(self) -> int:
        return self.driver.total_changes


def driver_of(conn: Any) -> Any:
    """The driver's connection under a transaction's connection, direct or SQLAlchemy's."""
    return conn.driver if isinstance(conn, DirectConnection) else conn.connection.dbapi_connection


def connect(database: str, *, busy_seconds: float, synchronous: str) -> sqlite3.Connection:
    """A connection in autocommit mode (dagrun opens its own transactions), with the
    store's pragmas."""
    driver = sqlite3.connect(database, timeout=busy_seconds, check_same_thread=False)
    set_up(driver, busy_seconds=busy_seconds, synchronous=synchronous)
    return driver


def set_up(driver: Any, *, busy_seconds: float, synchronous: str) -> None:
    """The pragmas of every store connection, made here or by SQLAlchemy's engine."""
    driver.isolation_level = None
    cursor = driver.cursor()
    _use_wal(cursor)
    cursor.execute(f"PRAGMA synchronous={synchronous}")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute(f"PRAGMA busy_timeout={int(busy_seconds * 1000)}")
    cursor.close()


def _use_wal(cursor: Any) -> None:
    """Switch a database to WAL once (it stays so): a new one, or dagrun's (a restored
    copy); never another program's, which ``Store.ensure_schema`` refuses untouched.
    Several processes opening a brand-new database at once may find it busy: the switch
    takes an exclusive lock that SQLite does not wait for, so try again briefly."""
    for attempt in range(100):
        try:
            if cursor.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal":
                return
            tables = {row[0] for row in cursor.execute(_TABLES)}
            if tables and "dagrun_meta" not in tables:
                return
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError:
            if attempt == 99:
                raise
            time.sleep(0.05)


def table_names(driver: Any) -> set[str]:
    return {row[0] for row in driver.execute(_TABLES)}


class DirectPool:
    """The connections of this process, kept between transactions (opening one costs its
    pragmas, closing the last one a checkpoint): a transaction takes any free one, whatever
    its thread, so a process whose threads take turns opens one or two, and a transaction
    opened inside another gets a second. A forked child opens its own: it never uses, or
    closes, its parent's (closing one there could end the parent's locks)."""

    def __init__(self, url: str, database: str, *, busy_seconds: float, synchronous: str) -> None:
        self.url = url
        self.database = database
        self._busy_seconds = busy_seconds
        self._synchronous = synchronous
        self._pid = os.getpid()
        self._free: list[sqlite3.Connection] = []
        self._open: list[sqlite3.Connection] = []
        self._inherited: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    @contextmanager
    def transaction(self, *, write: bool) -> Iterator[DirectConnection]:
        """A transaction committed when the block ends, rolled back if it raises; a
        connection whose transaction failed in the driver is dropped, never reused."""
        conn = DirectConnection(self._take(), self.url)
        driver = conn.driver
        try:
            driver.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            yield conn
            driver.execute("COMMIT")
        except BaseException as exc:
            with contextlib.suppress(sqlite3.Error):
                if driver.in_transaction:
                    driver.execute("ROLLBACK")
            self._give_back(conn, broken=isinstance(exc, sqlite3.Error))
            raise
        self._give_back(conn, broken=False)

    def _take(self) -> sqlite3.Connection:
        with self._lock:
            if os.getpid() != self._pid:
                self._forked()
            if self._free:
                return self._free.pop()
        driver = connect(
            self.database, busy_seconds=self._busy_seconds, synchronous=self._synchronous
        )
        with self._lock:
            self._open.append(driver)
        return driver

    def _give_back(self, conn: DirectConnection, *, broken: bool) -> None:
        with self._lock:
            if conn.driver not in self._open:  # closed meanwhile, or the parent's
                return
            if not (broken or conn.detached):
                self._free.append(conn.driver)
                return
            self._open.remove(conn.driver)
        _close([conn.driver])

    def _forked(self) -> None:
        """In a forked child (under the lock): keep the parent's connections unused."""
        self._inherited.extend(self._open)
        self._open, self._free = [], []
        self._pid = os.getpid()

    def close(self) -> None:
        """Close this process's connections (``Store.dispose``)."""
        with self._lock:
            if os.getpid() != self._pid:
                self._forked()
            opened, self._open, self._free = self._open, [], []
        _close(opened)


def _close(drivers: list[sqlite3.Connection]) -> None:
    for driver in drivers:
        with contextlib.suppress(sqlite3.Error):
            driver.close()

"""Database errors and outages: what a failed transaction means, and riding it out.

A driver error becomes one of dagrun's (``translate``): ``StoreConflict`` when the
transaction lost a race and may simply be tried again (``StoreLocked`` when SQLite's busy
timeout ended), ``StoreUnavailable`` when the database cannot be reached or the connection
was lost (an outage), ``StoreFull`` when the disk under it is full (ridden out as an outage:
a write succeeds again once space is freed), ``StoreDamaged`` when what it holds cannot be
read, ``NotDagrunStore`` when it is not dagrun's at all, else a plain ``StoreError``. Each
says what to do, in one line. A long-running process keeps one ``Health`` that every
transaction reports to, from any thread, so an outage is logged once when it starts and
once when it ends, and its loops (``ride_out``) retry with ``Backoff`` until
``OUTAGE_SECONDS`` have passed; damage and a database that is not dagrun's end them at once.
"""

from __future__ import annotations

import logging
import math
import re
import sqlite3
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from dagrun import settings
from dagrun.errors import (
    DagrunError,
    NotDagrunStore,
    OutageTooLong,
    StoreConflict,
    StoreDamaged,
    StoreError,
    StoreFull,
    StoreLocked,
    StoreUnavailable,
)
from dagrun.store.direct import DirectConnection
from dagrun.timing.backoff import Backoff

if TYPE_CHECKING:
    from sqlalchemy import Connection

log = logging.getLogger("dagrun.store")

#: Seconds a long-running process waits for the database to come back before it gives up.
OUTAGE_SECONDS: float = settings.get("database.outage_seconds")


class Health:
    """Whether the database answers, as one long-running process sees it: every transaction
    reports here, from any thread, so an outage is logged once when it starts and once
    when it ends however many loops notice it."""

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._down_since: float | None = None
        self._back_at = -math.inf
        self._last_error: StoreError | None = None

    @property
    def down(self) -> bool:
        return self._down_since is not None

    def failed(self, error: StoreError) -> None:
        if not isinstance(error, StoreUnavailable):
            return
        with self._lock:
            self._last_error = error
            if self._down_since is None:
                self._down_since = time.monotonic()
                log.warning("database unavailable, retrying for up to %g s: %s", self.limit, error)

    def ok(self, wrote: bool = True) -> None:
        """A transaction succeeded; ``wrote``: it wrote rows. On a full disk reads and
        writes that change nothing still succeed: only a write shows space was freed."""
        if self._down_since is None or (not wrote and isinstance(self._last_error, StoreFull)):
            return
        with self._lock:
            if self._down_since is not None:
                self._back_at = time.monotonic()
                log.warning("database is back after %.1f s", self._back_at - self._down_since)
                self._down_since = None

    def answered_for(self, seconds: float) -> bool:
        """Whether the database has answered for ``seconds`` since the last outage (or was
        never away)."""
        return self._down_since is None and time.monotonic() - self._back_at >= seconds

    def check(self) -> None:
        """Raise ``OutageTooLong`` once the current outage has lasted past the limit."""
        since = self._down_since
        if since is not None and time.monotonic() - since > self.limit:
            raise OutageTooLong(time.monotonic() - since, self.limit, self._last_error or "")


def ride_out(
    turn: Callable[[], float],
    stopped: threading.Event,
    fail: Callable[[BaseException], None],
    *,
    health: Health | None,
    what: str,
    backoff: Backoff | None = None,
) -> None:
    """The loop of a long-running role's thread: ``turn`` until ``stopped`` is set, waiting
    between turns the seconds it returns (none before the first).

    A database error is ridden out: the turn runs again after ``backoff``'s next delay.
    What cannot be ridden out ends the loop and goes to ``fail``: the outage past
    ``health``'s limit, or any other of dagrun's errors (a bug: better stop the process
    loudly than have it go on without this loop). The limit is checked after a turn that
    succeeded too: on a full disk a turn that only reads succeeds while every write fails.
    """
    backoff = backoff or Backoff()
    wait = 0.0
    while not stopped.wait(wait):
        try:
            wait = turn()
            backoff.reset()
            if health is not None:
                health.check()
        except OutageTooLong as fatal:
            fail(fatal)
            return
        except StoreError as exc:
            wait = backoff.next()
            try:
                note_failure(health, exc, what)
            except StoreError as fatal:
                fail(fatal)
                return
        except DagrunError as exc:
            fail(exc)
            return


#: What no wait mends: damage, and a database that is not dagrun's.
_LASTING = (StoreDamaged, NotDagrunStore)


def note_failure(health: Health | None, error: StoreError, what: str) -> None:
    """``what`` failed with ``error`` and will be tried again: raise ``error`` itself when
    no wait mends it (``_LASTING``), ``OutageTooLong`` once the outage has lasted past its
    limit, else log the error unless ``health`` logged the outage it belongs to already."""
    if isinstance(error, _LASTING):
        raise error
    if health is not None:
        health.check()
    if health is None or not health.down:
        log.warning("%s failed, will retry: %s", what, error)


def driver_errors(*more: type[Exception]) -> tuple[type[Exception], ...]:
    """Errors of the driver (and ``more``): straight from the driver's cursor (a direct
    connection, or SQLite reporting damage met while fetching rows), or raised through
    SQLAlchemy, when a process has loaded it (no SQLAlchemy error can be raised before)."""
    loaded = sys.modules.get("sqlalchemy.exc")
    return (sqlite3.Error, *more, *((loaded.DBAPIError,) if loaded else ()))


#: What reading a damaged value can raise besides (``unreadable``).
VALUE_ERRORS = (ValueError, TypeError)
#: PostgreSQL SQLSTATEs of a transaction that lost a race: deadlock victim, serialisation
#: failure, lock not available. SQLite says "database is locked" when its busy timeout ends.
_CONFLICT_STATES = {"40P01", "40001", "55P03"}
#: PostgreSQL SQLSTATEs of a full disk and of damaged data or indexes.
_FULL_STATES = {"53100"}
_DAMAGED_STATES = {"XX001", "XX002"}
#: SQLite's primary result codes (``sqlite3.Error.sqlite_errorcode & 0xFF``).
_SQLITE_BUSY = {5, 6}  # SQLITE_BUSY, SQLITE_LOCKED
_SQLITE_FULL = 13
_SQLITE_DAMAGED = 11  # SQLITE_CORRUPT
_SQLITE_NOT_A_DATABASE = 26  # SQLITE_NOTADB
#: SQLite cannot reach its file: SQLITE_PERM, SQLITE_READONLY, SQLITE_IOERR,
#: SQLITE_CANTOPEN (SQLite reports mistakes in statements as operational errors too, and
#: those are no outage).
_SQLITE_UNAVAILABLE = {3, 8, 10, 14}
#: What Python's sqlite3 says of a stored text value that is not UTF-8.
_UNDECODABLE = re.compile(r"Could not decode to UTF-8 column '([^']*)'")
#: Driver errors that are mistakes in dagrun's own statements (a broken constraint, bad
#: SQL): bugs, raised as they are rather than taken for the database's state (the
#: DB-API's names, which SQLAlchemy's errors share).
_MISTAKES = {"IntegrityError", "ProgrammingError", "DataError", "NotSupportedError"}
#: DB-API errors of a database that cannot be reached.
_UNREACHABLE = {"OperationalError", "InterfaceError"}


def translate(exc: Exception, url: str) -> StoreError | None:
    """A driver error as dagrun's, naming the database where it is the database's state:
    a conflict to retry, an outage, a full disk, damage, a file that is not dagrun's, or a
    plain StoreError; None for a mistake in a statement (``_MISTAKES``) and for a
    ``VALUE_ERRORS`` that did not come from reading the database."""
    database = where(url)
    if isinstance(exc, VALUE_ERRORS):
        if not unreadable(exc):
            return None
        detail = f"a stored value cannot be read: {first_line(exc)}"
        return StoreDamaged(database, detail, _restore(backend(url)))
    orig = getattr(exc, "orig", None) or exc
    if isinstance(orig, sqlite3.Error):
        return _translate_sqlite(exc, orig, database)
    state = getattr(orig, "sqlstate", None)
    message = f"database error: {first_line(exc)}"
    if state in _CONFLICT_STATES:
        return StoreConflict(message)
    if state in _FULL_STATES:
        return StoreFull(database, first_line(exc))
    if state in _DAMAGED_STATES:
        return StoreDamaged(database, first_line(exc), _restore("postgresql"))
    if type(exc).__name__ in _MISTAKES:
        return None
    if type(exc).__name__ in _UNREACHABLE or getattr(exc, "connection_invalidated", False):
        return StoreUnavailable(message)
    return StoreError(message)


def _translate_sqlite(exc: Exception, orig: sqlite3.Error, database: str) -> StoreError | None:
    detail = first_line(orig)
    code = (getattr(orig, "sqlite_errorcode", None) or 0) & 0xFF
    undecodable = _UNDECODABLE.match(detail)
    if code in _SQLITE_BUSY:
        return StoreLocked(database, detail)
    if code == _SQLITE_FULL:
        return StoreFull(database, detail)
    if code == _SQLITE_DAMAGED or undecodable:
        if undecodable:
            detail = f"column '{undecodable[1]}' holds text that is not UTF-8"
        return StoreDamaged(database, detail, _restore("sqlite"))
    if code == _SQLITE_NOT_A_DATABASE:
        return NotDagrunStore(database, f"is not a SQLite database ({detail})")
    if isinstance(orig, sqlite3.IntegrityError | sqlite3.ProgrammingError | sqlite3.DataError):
        return None
    message = f"database error: {detail}"
    if code in _SQLITE_UNAVAILABLE or getattr(exc, "connection_invalidated", False):
        return StoreUnavailable(message)
    return StoreError(message)


#: Where stored values are converted (``conversions``; SQLAlchemy's result processors,
#: compiled or not, for a statement run through SQLAlchemy).
_RESULT_PROCESSORS = ("dagrun.store.conversions", "sqlalchemy.engine._processors")
#: Where dagrun's own code calls the driver: an error the driver raises surfaces there.
_DRIVER_CALLERS = {
    "dagrun.store.sql",
    "dagrun.store.engine",
    "dagrun.store.direct",
    "dagrun.store.integrity",
}


def unreadable(exc: BaseException) -> bool:
    """Whether a ValueError or TypeError is a stored value that cannot be read: raised by
    a result conversion (turning a damaged text into an instant), or a
    UnicodeDecodeError raised by the driver itself (Python's sqlite3 raises one in place of
    SQLite's error when that error quotes damaged text, such as a damaged schema's)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    module = tb.tb_frame.f_globals.get("__name__", "") if tb is not None else ""
    driver = isinstance(exc, UnicodeDecodeError) and module in _DRIVER_CALLERS
    return module.startswith(_RESULT_PROCESSORS) or driver


def _restore(backend: str) -> str:
    """How to restore a damaged database."""
    if backend == "sqlite":
        return "restore the file from a copy made by `dagrun db backup`"
    return "restore it from a backup (pg_dump)"


def backend(url: str) -> str:
    """``sqlite`` or ``postgresql`` (or another backend's name) of a database URL."""
    return url.split(":", 1)[0].split("+", 1)[0]


def where(url: str) -> str:
    """The database as messages name it: a SQLite file's path, else its URL without the
    password."""
    if backend(url) == "sqlite":
        return url.split("?", 1)[0].removeprefix("sqlite://").removeprefix("/") or ":memory:"
    return _PASSWORD.sub(r"\1:***@", url)


_PASSWORD = re.compile(r"(//[^:/@]+):[^@]*@")


def damaged(conn: Connection, detail: str) -> StoreDamaged:
    """Damage dagrun noticed itself: a row it wrote in this transaction does not read back
    (a damaged index answers without an error)."""
    url = conn.url if isinstance(conn, DirectConnection) else conn.engine.url.render_as_string()
    return StoreDamaged(where(url), detail, _restore(conn.dialect.name))


def first_line(exc: BaseException) -> str:
    text_ = str(getattr(exc, "orig", None) or exc).strip()
    return text_.splitlines()[0] if text_ else type(exc).__name__

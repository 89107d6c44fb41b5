"""Database errors and outages: what a failed transaction means, and riding it out.

A driver error becomes one of dagrun's (``translate``): ``StoreConflict`` when the
transaction lost a race and may simply be tried again, ``StoreUnavailable`` when the
database cannot be reached or the connection was lost (an outage), else a plain
``StoreError``. A long-running process keeps one ``Health`` that every transaction reports
to, from any thread, so an outage is logged once when it starts and once when it ends, and
its loops (``ride_out``) retry with ``Backoff`` until ``OUTAGE_SECONDS`` have passed.
"""

from __future__ import annotations

import logging
import math
import os
import sqlite3
import threading
import time
from collections.abc import Callable

from sqlalchemy.exc import InterfaceError, OperationalError

from dagrun.errors import DagrunError, OutageTooLong, StoreConflict, StoreError, StoreUnavailable
from dagrun.timing.backoff import Backoff

log = logging.getLogger("dagrun.store")

#: Seconds a long-running process waits for the database to come back before it gives up.
OUTAGE_SECONDS = float(os.environ.get("DAGRUN_DB_OUTAGE_SECONDS", "300"))


class Health:
    """Whether the database answers, as one long-running process sees it: every transaction
    reports here, from any thread, so an outage is logged once when it starts and once
    when it ends however many loops notice it."""

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._down_since: float | None = None
        self._back_at = -math.inf
        self._last_error = ""

    @property
    def down(self) -> bool:
        return self._down_since is not None

    def failed(self, error: StoreError) -> None:
        if not isinstance(error, StoreUnavailable):
            return
        with self._lock:
            self._last_error = str(error)
            if self._down_since is None:
                self._down_since = time.monotonic()
                log.warning("database unavailable, retrying for up to %g s: %s", self.limit, error)

    def ok(self) -> None:
        if self._down_since is None:
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
            raise OutageTooLong(time.monotonic() - since, self.limit, self._last_error)


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
    loudly than have it go on without this loop).
    """
    backoff = backoff or Backoff()
    wait = 0.0
    while not stopped.wait(wait):
        try:
            wait = turn()
            backoff.reset()
        except StoreError as exc:
            wait = backoff.next()
            try:
                note_failure(health, exc, what)
            except OutageTooLong as fatal:
                fail(fatal)
                return
        except DagrunError as exc:
            fail(exc)
            return


def note_failure(health: Health | None, error: StoreError, what: str) -> None:
    """``what`` failed with ``error`` and will be tried again: raise ``OutageTooLong`` once
    the outage has lasted past its limit, else log the error unless ``health`` logged the
    outage it belongs to already."""
    if health is not None:
        health.check()
    if health is None or not health.down:
        log.warning("%s failed, will retry: %s", what, error)


#: Errors of reaching and using the database; others (an IntegrityError...) pass as they are.
DRIVER_ERRORS = (OperationalError, InterfaceError)
#: PostgreSQL SQLSTATEs of a transaction that lost a race: deadlock victim, serialisation
#: failure, lock not available. SQLite says "database is locked" when its busy timeout ends.
_CONFLICT_STATES = {"40P01", "40001", "55P03"}


def translate(exc: Exception) -> StoreError:
    """A driver error as dagrun's: a conflict to retry, an outage, or a plain StoreError."""
    orig = getattr(exc, "orig", None) or exc
    message = f"database error: {first_line(exc)}"
    state = getattr(orig, "sqlstate", None)
    if state in _CONFLICT_STATES or "database is locked" in str(orig):
        return StoreConflict(message)
    if isinstance(orig, sqlite3.Error):
        unavailable = any(words in str(orig) for words in _SQLITE_UNAVAILABLE)
    else:
        unavailable = isinstance(exc, OperationalError | InterfaceError)
    if unavailable or getattr(exc, "connection_invalidated", False):
        return StoreUnavailable(message)
    return StoreError(message)


#: What SQLite says when its file cannot be reached (SQLite reports mistakes in statements
#: as operational errors too, and those are no outage).
_SQLITE_UNAVAILABLE = ("unable to open", "disk I/O error", "readonly database", "no such file")


def first_line(exc: BaseException) -> str:
    text_ = str(getattr(exc, "orig", None) or exc).strip()
    return text_.splitlines()[0] if text_ else type(exc).__name__

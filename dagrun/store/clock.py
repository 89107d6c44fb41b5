"""Whose clock decides, and how far this host's clock is from it.

On PostgreSQL every decision about time (which runs are due, delayed runs, retries, pokes,
timeouts, leases) is taken by the database server's clock, read in the transaction that
acts on it (``Store.now``): a team's least accurate host never decides what is due. A host's
own clock only labels logs and progress. ``ClockWatch`` says when this host's clock is off
(once, and again when the difference changes), and when it jumps (an NTP step, a VM resumed
with an old clock); on SQLite the host's clock is the only one, so a jump is all it can see.
Task processes read the database's time as their host's clock plus the difference their
worker measured (``timing.instants.decision_now``): a sensor waiting for a time then waits
for the database's.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from dagrun.store import sql
from dagrun.store.engine import Store
from dagrun.timing.instants import OFFSET_ENV

#: The statements of this module (``queries/clock.py``).
Q = sql.Catalogue("dagrun.store.queries.clock", "clock.")

log = logging.getLogger("dagrun.clock")

#: A host clock this far from the database's is reported (seconds).
SKEW_SECONDS = 5.0
#: A step of the host clock this large, beside the monotonic clock, is logged as a jump
#: (less a second: the two clocks are not read at the same instant).
JUMP_SECONDS = 3600.0 - 1.0
#: Seconds between two measurements of a long-running process.
MEASURE_EVERY = 60.0


@dataclass(frozen=True)
class Skew:
    """The database's clock minus this host's, measured once."""

    database: datetime
    host: datetime

    @property
    def seconds(self) -> float:
        return (self.database - self.host).total_seconds()

    def describe(self) -> str:
        ahead = "ahead of" if self.seconds < 0 else "behind"
        return (
            f"this host's clock ({self.host.isoformat(timespec='seconds')}) is "
            f"{abs(self.seconds):.1f} s {ahead} the database's "
            f"({self.database.isoformat(timespec='seconds')}); the database's decides what is due"
        )


def measure(store: Store) -> Skew | None:
    """This host's clock against the database server's, halfway through the round trip;
    None where the host's clock is the only one (SQLite)."""
    if not store.caps.server_clock:
        return None
    with store.read() as conn:
        before = time.time()
        database = sql.scalar(conn, Q.SERVER_CLOCK).astimezone(UTC)
        after = time.time()
    host = datetime.fromtimestamp((before + after) / 2, UTC)
    return Skew(database, host)


class ProcessClock:
    """What one process has said about its clock, whichever of its loops noticed: a
    scheduler and its embedded worker watch the same clock and say each thing once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.said: float | None = None
        self.pair = (time.time(), time.monotonic())


_PROCESS = ProcessClock()


class ClockWatch:
    """What a long-running process says about its clock: a difference from the database's
    past ``SKEW_SECONDS`` (once, and again when it changes by as much), and a jump of the
    host's clock past ``JUMP_SECONDS``. ``check`` is cheap between measurements."""

    def __init__(
        self, store: Store, every: float = MEASURE_EVERY, process: ProcessClock = _PROCESS
    ):
        self.store = store
        self.every = every
        self.process = process
        self.last: Skew | None = None
        self._next = -math.inf

    @property
    def offset(self) -> float | None:
        """The last difference measured (the database's clock minus this host's, seconds);
        None before the first, and on SQLite."""
        return None if self.last is None else self.last.seconds

    def check(self) -> None:
        self._check_jump()
        if time.monotonic() < self._next:
            return
        self._next = time.monotonic() + self.every
        skew = measure(self.store)
        if skew is None:
            return
        self.last = skew
        os.environ[OFFSET_ENV] = f"{skew.seconds:.3f}"
        self._report(skew)

    def _report(self, skew: Skew) -> None:
        off = abs(skew.seconds) > SKEW_SECONDS
        with self.process.lock:
            said = self.process.said
            if off and (said is None or abs(skew.seconds - said) > SKEW_SECONDS):
                log.warning("%s", skew.describe())
                self.process.said = skew.seconds
            elif not off and said is not None:
                log.warning(
                    "this host's clock is within %g s of the database's again", SKEW_SECONDS
                )
                self.process.said = None

    def _check_jump(self) -> None:
        with self.process.lock:
            wall, mono = time.time(), time.monotonic()
            before_wall, before_mono = self.process.pair
            self.process.pair = (wall, mono)
        step = (wall - before_wall) - (mono - before_mono)
        if abs(step) >= JUMP_SECONDS:
            way = "forward" if step > 0 else "back"
            log.warning(
                "this host's clock jumped %s by %.0f s (now %s)",
                way,
                abs(step),
                datetime.fromtimestamp(wall, UTC).isoformat(timespec="seconds"),
            )

"""A side loop of a long-running process: a thread of its own that rides out outages.

A worker's lease keeper and a process's upkeep each run beside the main loop, so that no
slow step of one holds up the other; both are this class with a ``turn`` of their own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from dagrun.store import Store
from dagrun.store.outage import ride_out
from dagrun.timing.backoff import Backoff


class SideLoop:
    """``turn`` on a daemon thread from ``start()`` (or entering a ``with`` block) until
    ``stop()`` (or leaving it), waiting between turns what each returns; a database
    error is ridden out (``ride_out``), and one that cannot be goes to ``fail``."""

    #: The thread's name, and what a turn does (for the log line when it fails).
    name = "dagrun-loop"
    what = "turn"

    def __init__(self, store: Store, fail: Callable[[BaseException], None]) -> None:
        self.store = store
        self.fail = fail
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self.run, name=self.name, daemon=True)

    def turn(self) -> float:
        """One turn; the seconds until the next."""
        raise NotImplementedError

    def backoff(self) -> Backoff:
        """The delays between retries of a failed turn."""
        return Backoff()

    def run(self) -> None:
        health, backoff = self.store.health, self.backoff()
        ride_out(
            self.turn, self._stopped, self.fail, health=health, what=self.what, backoff=backoff
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop, waiting (up to 10 s) for the turn under way."""
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(10)

    def __enter__(self) -> SideLoop:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

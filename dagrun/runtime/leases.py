"""A worker's leases, kept on a thread of their own.

The worker's loop may be busy (a big claim, forking a child, a database that stalls it);
leases must not wait for it. The keeper renews every lease the worker holds about every
third of its length, and tells the worker of attempts an operator took away
(``store.operator_actions``), to stop them. It sweeps nothing: the queue's upkeep is a loop
of its own (``runtime.upkeep``). An error it cannot ride out stops the worker.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from dagrun.runtime.loops import SideLoop
from dagrun.store import Store, attempts
from dagrun.timing.backoff import Backoff

log = logging.getLogger("dagrun.worker")


class LeaseKeeper(SideLoop):
    """Renews the leases in ``held()`` and looks for attempts an operator stopped (every
    ``look_interval``), until ``stop()``; tells the worker of a fatal error (``fail``) and
    of the attempts to stop (``stop_attempts``)."""

    name = "dagrun-leases"
    what = "keeping leases"

    def __init__(
        self,
        store: Store,
        owner: str,
        *,
        lease_seconds: float,
        look_interval: float,
        fail: Callable[[BaseException], None],
        stop_attempts: Callable[[set[tuple[int, int]]], None],
    ) -> None:
        super().__init__(store, fail)
        self.owner = owner
        self.lease_seconds = lease_seconds
        #: How often leases are renewed: about every third of their length.
        self.every = lease_seconds / 3
        self.look_interval = look_interval
        self.stop_attempts = stop_attempts
        self._held: set[tuple[int, int]] = set()
        self._lock = threading.Lock()
        self._next_extend = self._next_look = 0.0  # the first turn: nothing held yet

    def hold(self, leases: list[tuple[int, int]]) -> None:
        with self._lock:
            self._held.update(leases)

    def forget(self, leases: list[tuple[int, int]]) -> None:
        with self._lock:
            self._held.difference_update(leases)

    def held(self) -> set[tuple[int, int]]:
        with self._lock:
            return set(self._held)

    def backoff(self) -> Backoff:
        return Backoff(cap=self.every)  # back soon after an outage: renew before others reap

    def turn(self) -> float:
        """Extend the leases, look for stopped attempts, each when due; the seconds until
        the next is due."""
        if time.monotonic() >= self._next_extend:
            self.extend()
            self._next_extend = time.monotonic() + self.every
        if time.monotonic() >= self._next_look:
            self.look_for_stops()
            self._next_look = time.monotonic() + self.look_interval
        return max(0.0, min(self._next_extend, self._next_look) - time.monotonic())

    def extend(self) -> None:
        held = self.held()
        if not held:
            return
        with self.store.write() as conn:
            lost = attempts.extend_leases(
                conn, self.owner, held, self.lease_seconds, self.store.now(conn)
            )
        for ti_id, fence in sorted(lost & self.held()):  # not the ones ended meanwhile
            log.warning(
                "lease lost for task instance %s (fence %s); its result will be discarded",
                ti_id,
                fence,
            )

    def look_for_stops(self) -> None:
        """Attempts an operator took away (cancel, mark) are no longer held: the worker
        stops their processes now rather than let them run on for nothing."""
        held = self.held()
        if not held:
            return
        with self.store.read() as conn:
            stopped = attempts.stopped_by_hand(conn, held)
        if stopped:
            self.forget(list(stopped))
            self.stop_attempts(stopped)

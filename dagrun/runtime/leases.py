"""A worker's leases, kept on a thread of their own.

The worker's loop may be busy (a big claim, forking a child, a database that stalls it);
leases must not wait for it. The keeper renews every lease the worker holds about every
third of its length, and tells the worker of attempts an operator took away
(``store.operator_actions``), to stop them. It also keeps the worker's heartbeat
(``store.heartbeats``): in the transaction that renews leases when one is due, in one of
its own every few seconds when none is. It sweeps nothing: the queue's upkeep is a loop of
its own (``runtime.upkeep``). An error it cannot ride out stops the worker.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from dagrun.runtime.loops import SideLoop
from dagrun.store import Store, attempts
from dagrun.store.heartbeats import Pulse
from dagrun.timing.backoff import Backoff

log = logging.getLogger("dagrun.worker")


class LeaseKeeper(SideLoop):
    """Renews the leases in ``held()``, beats the worker's ``pulse`` (with the clock offset
    ``offset()`` returns) and looks for attempts an operator stopped (every
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
        pulse: Pulse,
        offset: Callable[[], float | None],
    ) -> None:
        super().__init__(store, fail)
        self.owner = owner
        self.pulse = pulse
        self.offset = offset
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
        """Extend the leases (beating too), beat, look for stopped attempts, each when due;
        the seconds until the next is due."""
        if time.monotonic() >= self._next_extend:
            self.extend()
            self._next_extend = time.monotonic() + self.every
        if self.pulse.due():
            self.beat()
        if time.monotonic() >= self._next_look:
            self.look_for_stops()
            self._next_look = time.monotonic() + self.look_interval
        waits = (self._next_extend - time.monotonic(), self._next_look - time.monotonic())
        return max(0.0, min(*waits, self.pulse.wait()))

    def extend(self) -> None:
        """Renew the leases held, and beat in the same transaction (no extra one)."""
        held = self.held()
        if not held:
            return
        with self.store.write() as conn:
            now = self.store.now(conn)
            lost = attempts.extend_leases(conn, self.owner, held, self.lease_seconds, now)
            self.pulse.beat(conn, now, self.offset())
        for ti_id, fence in sorted(lost & self.held()):  # not the ones ended meanwhile
            log.warning(
                "lease lost for task instance %s (fence %s); its result will be discarded",
                ti_id,
                fence,
            )

    def beat(self) -> None:
        """The worker's heartbeat in a transaction of its own: no renewal carried one."""
        with self.store.write() as conn:
            self.pulse.beat(conn, self.store.now(conn), self.offset())

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

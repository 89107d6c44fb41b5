"""A worker's leases, kept on a thread of their own.

The worker's loop may be busy (a big claim, forking a child, a database that stalls it);
leases must not wait for it. The keeper renews every lease the worker holds about every
third of its length, and sweeps the queue (retries due, leases expired, see ``upkeep``) on
its interval. After the database was unreachable it waits one lease before reaping, so
workers cut off with it renew their leases before anyone takes them away; it also has the
worker listen for queued work again then. It also tells the worker of attempts an operator
took away (``store.manual``), to stop them. An error it cannot ride out stops the worker.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from dagrun.errors import DagrunError, StoreError
from dagrun.store import Store, attempts, registry, upkeep
from dagrun.store.outage import Backoff

log = logging.getLogger("dagrun.runtime.worker")


class LeaseKeeper:
    """Renews the leases in ``held()`` and sweeps the queue, until ``stop()``; tells the
    worker of queued work (``wake``), of a fatal error (``fail``), and when to listen again
    after an outage (``relisten``)."""

    def __init__(
        self,
        store: Store,
        owner: str,
        specs: registry.SpecCache,
        *,
        lease_seconds: float,
        sweep_interval: float,
        infra_budget: int,
        wake: Callable[[], None],
        fail: Callable[[BaseException], None],
        relisten: Callable[[], None],
        stop_attempts: Callable[[set[tuple[int, int]]], None],
    ) -> None:
        self.store = store
        self.owner = owner
        self.specs = specs
        self.lease_seconds = lease_seconds
        self.sweep_interval = sweep_interval
        self.infra_budget = infra_budget
        self.wake = wake
        self.fail = fail
        self.relisten = relisten
        self.stop_attempts = stop_attempts
        self._held: set[tuple[int, int]] = set()
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dagrun-leases", daemon=True)
        self._reap_after = 0.0

    def hold(self, leases: list[tuple[int, int]]) -> None:
        with self._lock:
            self._held.update(leases)

    def forget(self, leases: list[tuple[int, int]]) -> None:
        with self._lock:
            self._held.difference_update(leases)

    def held(self) -> set[tuple[int, int]]:
        with self._lock:
            return set(self._held)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(10)

    def _run(self) -> None:
        every = self.lease_seconds / 3
        next_extend = time.monotonic() + every
        next_sweep = time.monotonic()
        backoff = Backoff(cap=every)  # back soon after an outage: renew before others reap
        while not self._stopped.wait(max(0.0, min(next_extend, next_sweep) - time.monotonic())):
            try:
                if time.monotonic() >= next_extend:
                    self.extend()
                    next_extend = time.monotonic() + every
                if time.monotonic() >= next_sweep:
                    self.sweep()
                    self.relisten()
                    next_sweep = time.monotonic() + self.sweep_interval
                backoff.reset()
            except StoreError:
                self._reap_after = time.monotonic() + self.lease_seconds
                delay = time.monotonic() + backoff.next()
                next_extend, next_sweep = min(next_extend, delay), max(next_sweep, delay)
                if self._check_outage():
                    return
            except DagrunError as exc:  # a bug: stop the worker loudly rather than lose leases
                self.fail(exc)
                return

    def _check_outage(self) -> bool:
        health = self.store.health
        try:
            if health is not None:
                health.check()
        except StoreError as exc:
            self.fail(exc)
            return True
        return False

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

    def sweep(self) -> None:
        reap = time.monotonic() >= self._reap_after
        report = upkeep.sweep(self.store, self.specs, self.infra_budget, reap=reap)
        if report.queued_work:
            self.wake()
        self.look_for_stops()

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

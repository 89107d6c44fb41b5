"""The upkeep of the queue, a loop of its own: one per process, whatever runs in it.

Retries and sensors' pokes whose time has come go back to the queue, and leases that ran
out (of attempts and of callbacks) are reaped (``store.upkeep.sweep``). Who does it is
decided in one place per process layout, by the code that composes the process, and it is
always one ``UpkeepLoop`` on a thread of its own:

- ``dagrun scheduler`` starts one, with embedded workers or without (``--workers 0``: the
  retries still wake, and the leases of workers elsewhere are still reaped);
- ``dagrun worker`` starts one (with workers alone, and no scheduler, the leases of a
  worker that died are still reaped by the others);
- a run's driver (``dagrun run``, backfill) starts one beside its embedded worker.

No role sweeps: the scheduler only schedules and a worker's lease keeper only keeps its
leases, so neither a slow parse nor a busy worker loop holds the upkeep up, nor the
upkeep them. Any number of processes may sweep at once (every change is a guarded update).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from dagrun.errors import StoreError
from dagrun.runtime.loops import SideLoop
from dagrun.store import Store, registry, upkeep
from dagrun.store.attempts import DEFAULT_INFRA_BUDGET, DEFAULT_LEASE_SECONDS

if TYPE_CHECKING:
    from dagrun.runtime.worker import Worker

#: Seconds between sweeps when the process does not say.
SWEEP_SECONDS = 1.0


class UpkeepLoop(SideLoop):
    """Sweep the queue every ``interval`` seconds, from ``start()`` (or entering a ``with``
    block) until ``stop()`` (or leaving it).

    ``after_sweep`` is told after each sweep whether it queued work (a worker in the same
    process claims it at once, and listens again if an outage cut its listener off: the
    database answers). ``fail`` gets an error the loop cannot ride out, to stop the
    process with it.
    """

    name = "dagrun-upkeep"
    what = "sweep"

    def __init__(
        self,
        store: Store,
        fail: Callable[[BaseException], None],
        *,
        interval: float = SWEEP_SECONDS,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        infra_budget: int = DEFAULT_INFRA_BUDGET,
        after_sweep: Callable[[bool], None] | None = None,
    ) -> None:
        super().__init__(store, fail)
        self.interval = interval
        self.lease_seconds = lease_seconds
        self.infra_budget = infra_budget
        self.after_sweep = after_sweep
        self.specs = registry.SpecCache()
        self._reap_after = 0.0

    @classmethod
    def beside(cls, worker: Worker, interval: float = SWEEP_SECONDS) -> UpkeepLoop:
        """The upkeep of a process that runs ``worker``: the worker's lease length and
        budget; an error it cannot ride out stops the worker (whose ``run`` raises it)."""
        options = worker.options
        return cls(
            worker.store,
            worker.fail,
            interval=interval,
            lease_seconds=options.lease_seconds,
            infra_budget=options.infra_budget,
            after_sweep=worker.swept,
        )

    def turn(self) -> float:
        """One sweep; the seconds until the next."""
        try:
            report = upkeep.sweep(self.store, self.specs, self.infra_budget, reap=self._may_reap())
        except StoreError:
            self._reap_after = math.inf  # until a lease after the database answers again
            raise
        if self._reap_after == math.inf:  # it answers again
            self._reap_after = time.monotonic() + self.lease_seconds
        if self.after_sweep is not None:
            self.after_sweep(report.queued_work)
        return self.interval

    def _may_reap(self) -> bool:
        """Not until a lease after an outage ends, as this loop or any transaction of the
        process saw it: workers cut off with this process renew their leases before
        anyone takes them away."""
        health = self.store.health
        answered = health is None or health.answered_for(self.lease_seconds)
        return answered and time.monotonic() >= self._reap_after

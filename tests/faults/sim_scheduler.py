"""A scheduler process on a simulated clock that also completes the tasks it queues.

Run by the two-scheduler fault test: ``python -m tests.faults.sim_scheduler URL FOLDER
EPOCH SIM_START SIM_END SPEED``. Every process started with the same EPOCH sees the same
simulated time, SPEED simulated seconds per real second, so several processes can tick the
same DAGs through a month in seconds.
"""

from __future__ import annotations

import sys
import time
from datetime import datetime, timedelta

from dagrun.errors import StoreConflict
from dagrun.runtime.scheduler import Scheduler
from dagrun.states import AttemptOutcome
from dagrun.store import Store, attempts, registry
from dagrun.store.attempts import Outcome


def main(url: str, folder: str, epoch: str, sim_start: str, sim_end: str, speed: str) -> None:
    store = Store(url)
    start, end = datetime.fromisoformat(sim_start), datetime.fromisoformat(sim_end)
    real0, rate = float(epoch), float(speed)

    def clock() -> datetime:
        return min(end, start + timedelta(seconds=(time.time() - real0) * rate))

    scheduler = Scheduler(store, folder, clock=clock, parse_interval=3600)
    specs = registry.SpecCache()
    owner = f"sim:{time.time_ns()}"
    while clock() < end or _active(store):
        try:
            scheduler.tick()
            _work(store, owner, specs)
        except StoreConflict:  # a deadlock victim: rolled back, tried again (as the
            continue  # scheduler's loop and a worker's group commit do)
    store.dispose()


def _work(store: Store, owner: str, specs: registry.SpecCache) -> None:
    """Claim what is queued and complete it at once, in one transaction (a worker's turn)."""
    with store.write() as conn:
        now = store.now(conn)
        claims = attempts.claim(conn, owner, 50, 60, now)
        outcomes = [Outcome.of(c, AttemptOutcome.SUCCESS) for c in claims]
        attempts.complete(conn, owner, outcomes, specs.bound(conn), now)


def _active(store: Store) -> bool:
    from sqlalchemy import func, select

    from dagrun.store.schema import dag_run

    with store.read() as conn:
        return (
            conn.execute(
                select(func.count()).where(dag_run.c.state.in_(["waiting", "queued", "running"]))
            ).scalar_one()
            > 0
        )


if __name__ == "__main__":
    main(*sys.argv[1:])

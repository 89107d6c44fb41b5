"""The scheduler: turns timetables into runs and runs into queued work.

Each tick refreshes DAGs from the parser (changed files only), then for every unpaused DAG,
under that DAG's row lock (skipped if another scheduler holds it), creates the runs that are
due, admits waiting runs within ``max_active_runs`` and starts admitted runs whose ``spread``
delay has passed. A sweep then wakes retries whose time has come and turns expired leases
into new attempts. The date arithmetic is pure (``timetable``); the unique run key makes a
double fire harmless; the cursor on the DAG row makes a crash mid-tick resume exactly.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from dagrun.errors import StoreError
from dagrun.spec import DagSpec
from dagrun.states import RunType
from dagrun.store import Store, registry, transitions
from dagrun.sync import sync_dags
from dagrun.timetable import spread_offset

log = logging.getLogger("dagrun.scheduler")

Clock = Callable[[], datetime]
#: Runs created per DAG per tick, so a DAG with years of catchup cannot stall a tick.
MAX_CREATE_PER_TICK = 1000
_EPSILON = timedelta(microseconds=1)


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class TickReport:
    created: dict[str, int] = field(default_factory=dict)
    admitted: dict[str, int] = field(default_factory=dict)
    started: dict[str, int] = field(default_factory=dict)
    requeued: int = 0
    reaped: int = 0

    @property
    def queued_work(self) -> bool:
        """True when this tick may have queued tasks (so workers should claim now)."""
        return bool(self.started or self.requeued or self.reaped)


class Scheduler:
    """Create, admit and start runs for every unpaused DAG; sweep retries and leases."""

    def __init__(
        self,
        store: Store,
        folder: str | None,
        *,
        clock: Clock = utc_now,
        parse_interval: float = 5.0,
        lease_loss_budget: int = transitions.DEFAULT_LEASE_LOSS_BUDGET,
    ):
        self.store = store
        self.folder = folder
        self.clock = clock
        self.parse_interval = parse_interval
        self.lease_loss_budget = lease_loss_budget
        self.specs = registry.SpecCache()
        self._last_parse = float("-inf")
        self._holds: dict[str, str] = {}

    def tick(self) -> TickReport:
        report = TickReport()
        self._refresh_dags()
        with self.store.read() as conn:
            dags = registry.active_dags(conn)
        for row in dags:
            try:
                self._schedule_dag(row.dag_id, report)
            except StoreError as exc:
                log.warning("%s: tick rolled back, next tick retries: %s", row.dag_id, exc)
        try:
            report.requeued, report.reaped = sweep(self.store, self.specs, self.lease_loss_budget)
        except StoreError as exc:
            log.warning("sweep rolled back, next tick retries: %s", exc)
        return report

    def _refresh_dags(self) -> None:
        if self.folder is None or time.monotonic() - self._last_parse < self.parse_interval:
            return
        self._last_parse = time.monotonic()
        result = sync_dags(self.store, self.folder)
        for path in result.parsed:
            log.info("parsed %s", path)

    def _schedule_dag(self, dag_id: str, report: TickReport) -> None:
        now = self.clock()
        with self.store.write() as conn:
            if not transitions.lock_dag(conn, self.store.caps, dag_id, skip_locked=True):
                return
            row = registry.get_dag(conn, dag_id)
            if row.is_paused:
                self._hold(dag_id, "paused")
                return
            spec = row.spec
            created = self._create_due_runs(conn, spec, row.next_logical_date, now)
            admitted = transitions.admit_runs(conn, spec, spec.max_active_runs, now)
            started = transitions.start_runs(conn, spec, now)
            waiting = 0 if admitted else transitions.count_waiting_runs(conn, dag_id)
        if created:
            report.created[dag_id] = created
            log.info("%s: created %d run(s)", dag_id, created)
        if admitted:
            report.admitted[dag_id] = len(admitted)
        if started:
            report.started[dag_id] = len(started)
            log.info("%s: started %d run(s)", dag_id, len(started))
        if waiting:
            self._hold(dag_id, f"{waiting} run(s) wait for max_active_runs={spec.max_active_runs}")
        else:
            self._holds.pop(dag_id, None)

    def _create_due_runs(self, conn, spec: DagSpec, cursor: datetime | None, now: datetime) -> int:
        tt = spec.timetable
        if not tt.schedulable:
            return 0
        due = tt.due_intervals(cursor, now, spec.catchup)[:MAX_CREATE_PER_TICK]
        if not due:
            return 0
        delay = (
            spread_offset(spec.dag_id, timedelta(seconds=spec.spread_seconds))
            if spec.spread_seconds
            else timedelta(0)
        )
        created = transitions.create_runs(conn, spec, due, RunType.SCHEDULED, now, delay)
        transitions.set_cursor(conn, spec.dag_id, due[-1].start + _EPSILON)
        return created

    def _hold(self, dag_id: str, reason: str) -> None:
        """Log why a DAG's runs are held back, once per change of reason."""
        if self._holds.get(dag_id) != reason:
            self._holds[dag_id] = reason
            log.info("%s: holding runs: %s", dag_id, reason)


def sweep(
    store: Store,
    specs: registry.SpecCache,
    lease_loss_budget: int = transitions.DEFAULT_LEASE_LOSS_BUDGET,
) -> tuple[int, int]:
    """Wake retries whose time has come; turn expired leases into new attempts (or failures).

    A lease held by a worker process of this host that no longer exists is reaped at once
    instead of at its expiry, so a backfill restarted after a crash resumes immediately.
    """
    with store.write() as conn:
        now = store.now(conn)
        requeued = transitions.requeue_retries(conn, now)
        dead = {o for o in transitions.lease_owners(conn) if _gone_from_this_host(o)}
        reaped = transitions.reap_expired(
            conn, store.caps, specs.bound(conn), now, lease_loss_budget, dead
        )
        missing = transitions.pools_missing(conn)
    for name in missing:
        if name not in _WARNED_POOLS:
            _WARNED_POOLS.add(name)
            log.warning(
                "tasks wait for pool '%s', which does not exist: create it with "
                "`dagrun pools set %s SLOTS`",
                name,
                name,
            )
    for r in reaped:
        verdict = "failed (lease-loss budget spent)" if r.failed else "queued again"
        log.warning(
            "%s.%s: lease expired (fence %s); %s", r.dag_id, r.task_id, r.fence_token, verdict
        )
    return requeued, len(reaped)


_WARNED_POOLS: set[str] = set()


def _gone_from_this_host(owner: str) -> bool:
    """True for a worker id (``host:pid:nonce``) of this host whose process has exited."""
    host, _, rest = owner.partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False

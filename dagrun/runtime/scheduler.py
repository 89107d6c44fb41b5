"""The scheduler: turns timetables into runs and runs into queued work, in a loop of its own.

Each tick refreshes DAGs from the parser (changed files only), then for every unpaused DAG,
under that DAG's row lock (skipped if another scheduler holds it), creates the runs that are
due, admits waiting runs within ``max_active_runs`` and starts admitted runs whose ``spread``
delay has passed. The date arithmetic is pure (``timetable``); the unique run key makes a
double fire harmless; the cursor on the DAG row makes a crash mid-tick resume exactly. What
is due is decided by the store's clock (the database server's on PostgreSQL), read in the
transaction that creates the runs, never by this host's (``store.clock``). The queue's
upkeep (retries due, expired leases) is not the scheduler's: ``runtime.upkeep``.

``SchedulerLoop`` ticks on its own thread (``dagrun scheduler`` beside its embedded worker)
or in the foreground (``--workers 0``), so a slow parse never holds up claiming or leases.
It rides out database outages like every long-running role (``outage.ride_out``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from dagrun.errors import StoreConflict
from dagrun.parsing.spec import DagSpec
from dagrun.runtime.dag_sync import FolderChoice, sync_dags
from dagrun.states import RunType
from dagrun.store import (
    Store,
    asset_triggers,
    assets,
    dag_reads,
    operator_actions,
    pools,
    registry,
    runs,
)
from dagrun.store.attempts import Completion
from dagrun.store.clock import ClockWatch
from dagrun.store.heartbeats import Pulse, Role
from dagrun.store.outage import ride_out
from dagrun.timing.instants import spread_offset

if TYPE_CHECKING:
    from sqlalchemy import Connection

log = logging.getLogger("dagrun.scheduler")

Clock = Callable[[], datetime]
#: Runs created per DAG per tick, so a DAG with years of catchup cannot stall a tick.
MAX_CREATE_PER_TICK = 1000
#: Runs one transaction admits and starts; past it, each further batch commits on its own.
ADMIT_PER_COMMIT = 500
_EPSILON = timedelta(microseconds=1)


@dataclass
class TickReport:
    """What one scheduler tick did, per DAG: runs created, admitted and started."""

    created: dict[str, int] = field(default_factory=dict)
    admitted: dict[str, int] = field(default_factory=dict)
    started: dict[str, int] = field(default_factory=dict)

    @property
    def queued_work(self) -> bool:
        """True when this tick may have queued tasks (so workers should claim now)."""
        return bool(self.started)


class Scheduler:
    """Create, admit and start runs for every unpaused DAG."""

    def __init__(
        self,
        store: Store,
        folder: str | None,
        *,
        clock: Clock | None = None,
        parse_interval: float = 5.0,
    ):
        self.store = store
        self.folder = folder
        self.clock = clock
        self.parse_interval = parse_interval
        self.specs = registry.SpecCache()
        self._last_parse = float("-inf")
        self._holds: dict[str, str] = {}
        self._warned_pools: set[str] = set()
        self._folder_said: tuple[str, str | None] | None = None
        #: The asset event id every writer has settled (``asset_triggers.settled``).
        self._settled = 0

    def tick(self) -> TickReport:
        report = TickReport()
        self._refresh_dags()
        with self.store.read() as conn:
            dags = dag_reads.active_dags(conn)
        if any(row.spec.assets or row.spec.condition is not None for row in dags):
            self._settled = asset_triggers.settled(self.store, self._settled)
        settled = self._settled
        for row in dags:
            try:
                self._schedule_dag(row.dag_id, report, settled)
            except StoreConflict as exc:  # another scheduler or a worker won a race
                log.warning("%s: tick rolled back, next tick retries: %s", row.dag_id, exc)
        with self.store.read() as conn:
            self._warn_missing_pools(pools.missing_pools(conn))
        return report

    def _warn_missing_pools(self, names: list[str]) -> None:
        for name in names:
            if name not in self._warned_pools:
                self._warned_pools.add(name)
                log.warning(
                    "tasks wait for pool '%s', which does not exist: create it with "
                    "`dagrun pools set %s SLOTS`",
                    name,
                    name,
                )

    def admit_after(self, conn: Connection, completion: Completion, now: datetime) -> None:
        """A worker's commit hook: runs just ended, so admit and start the next runs of
        their (unpaused) DAGs in the same transaction, and the worker claims their first
        tasks in it too."""
        dag_ids = {o.dag_id for o in completion.accepted if o.run_pk in completion.finished_runs}
        for dag_id in sorted(dag_ids):
            row = dag_reads.get_dag(conn, dag_id, active=False)
            if row.is_active and not row.is_paused:
                runs.admit_and_start(conn, row.spec, now)

    def _refresh_dags(self) -> None:
        if self.folder is None or time.monotonic() - self._last_parse < self.parse_interval:
            return
        first = self._last_parse == float("-inf")
        self._last_parse = time.monotonic()
        result = sync_dags(self.store, self.folder)
        self._say_folder(result.folder)
        failed = dict(result.failed)
        if first:  # another command may have parsed a broken file before this scheduler
            with self.store.read() as conn:
                failed.update({f.path: f.error or "" for f in dag_reads.import_errors(conn)})
        for path in sorted(set(result.parsed) | set(failed)):
            if path in failed:  # once per change of the file: unchanged ones are not parsed
                log.warning("%s failed to import: %s", path, failed[path])
            else:
                log.info("parsed %s", path)

    def _say_folder(self, choice: FolderChoice | None) -> None:
        """Log the folder served, and why it is not the one asked for, when either changes
        (a ``db rebind-folder`` while the scheduler runs, a share unmounted)."""
        if choice is None or (choice.served, choice.note) == self._folder_said:
            return
        self._folder_said = (choice.served, choice.note)
        log.info("dags folder %s", choice.served)
        if choice.note:
            log.warning("%s", choice.note)

    def _schedule_dag(self, dag_id: str, report: TickReport, settled: int) -> None:
        """Create, admit and start one DAG's runs; asset events are read up to ``settled``
        (``asset_triggers.settled``)."""
        with self.store.write() as conn:
            if not runs.lock_dag(conn, dag_id, skip_locked=True):
                return
            now = self.clock() if self.clock else self.store.now(conn)
            row = dag_reads.get_dag(conn, dag_id)
            if row.is_paused:
                self._hold(dag_id, "paused")
                return
            spec = row.spec
            timed_out = operator_actions.time_out_runs(conn, spec, now)
            created = self._create_due_runs(conn, spec, row.cursor, now)
            created += self._run_for_assets(conn, spec, now, settled)
            created += self._run_for_condition(conn, spec, now, settled)
            admitted, started = _admit_and_start(conn, spec, now)
            waiting = 0 if admitted else runs.count_waiting_runs(conn, dag_id, now)
        if len(admitted) == ADMIT_PER_COMMIT:
            more_admitted, more_started = self._admit_the_rest(spec, now)
            admitted, started = admitted + more_admitted, started + more_started
        if timed_out:
            log.warning(
                "%s: failed %d run(s) past dagrun_timeout=%gs",
                dag_id,
                timed_out,
                spec.dagrun_timeout,
            )
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

    def _admit_the_rest(self, spec: DagSpec, now: datetime) -> tuple[list[int], list[int]]:
        """After a full batch, admit and start the next batches, a commit each: workers
        start on the first runs while the rest are admitted (50,000 runs due at once made
        one transaction, and no task began for 7 s)."""
        admitted: list[int] = []
        started: list[int] = []
        while True:
            with self.store.write() as conn:
                if not runs.lock_dag(conn, spec.dag_id, skip_locked=True):
                    break
                batch, begun = _admit_and_start(conn, spec, now)
            admitted += batch
            started += begun
            if len(batch) < ADMIT_PER_COMMIT:
                break
        return admitted, started

    def _create_due_runs(self, conn, spec: DagSpec, cursor: datetime | None, now: datetime) -> int:
        """Create the runs that fell due. Without catchup the backlog is bounded: no run is
        created while the DAG has ``max_active_runs`` runs queued or running; the latest due
        interval is created once a slot frees (the cursor stays, so it is found then)."""
        tt = spec.timetable
        if not tt.schedulable:
            return 0
        if cursor is None and (first := tt.first_cursor(now)) is not None:
            runs.set_cursor(conn, spec.dag_id, first)  # decided once, as Airflow does
            cursor = first
        if not spec.catchup and runs.count_active_runs(conn, spec.dag_id) >= spec.max_active_runs:
            return 0
        due = tt.due_intervals(cursor, now, spec.catchup)[:MAX_CREATE_PER_TICK]
        if not due:
            return 0
        delay = (
            spread_offset(spec.dag_id, timedelta(seconds=spec.spread_seconds))
            if spec.spread_seconds
            else timedelta(0)
        )
        created = runs.create_runs(conn, spec, due, RunType.SCHEDULED, now, delay)
        runs.set_cursor(conn, spec.dag_id, due[-1].start + _EPSILON)
        return created

    def _run_for_assets(self, conn: Connection, spec: DagSpec, now: datetime, settled: int) -> int:
        """An asset-scheduled DAG: a run per partition key its assets all have new events
        for, or a re-run of the key's finished run when a partition really changed (as
        ``clear`` would). Returns the runs made."""
        if not spec.assets:
            return 0
        found = assets.look(conn, spec, settled)
        for due in found.due:
            if due.run_pk is None:
                runs.create_runs(conn, spec, [due.interval], RunType.ASSET, now)
                log.info("%s: run for %s (its assets have a partition)", spec.dag_id, due.key)
            else:
                operator_actions.clear_runs(conn, spec, {due.run_pk: None}, now)
                log.info("%s: %s runs again (an asset's partition changed)", spec.dag_id, due.key)
        for due in [*found.due, *found.settled]:
            assets.consume(conn, spec, due, now)
        if found.cursor is not None:
            assets.move_cursor(conn, spec, found.cursor)
        return sum(1 for due in found.due if due.run_pk is None)

    def _run_for_condition(
        self, conn: Connection, spec: DagSpec, now: datetime, settled: int
    ) -> int:
        """A DAG on an Airflow-style asset condition: a run when the condition holds over
        the assets with new events, consuming them (``asset_triggers``)."""
        if spec.condition is None:
            return 0
        made = asset_triggers.trigger(conn, spec, now, settled)
        if made is None:
            return 0
        log.info(
            "%s: asset-triggered run at %s (new events of %s)",
            spec.dag_id,
            made.logical_date.isoformat(),
            ", ".join(made.assets),
        )
        return 1

    def _hold(self, dag_id: str, reason: str) -> None:
        """Log why a DAG's runs are held back, once per change of reason."""
        if self._holds.get(dag_id) != reason:
            self._holds[dag_id] = reason
            log.info("%s: holding runs: %s", dag_id, reason)


class SchedulerLoop:
    """Tick the scheduler every ``interval`` seconds, or at once when woken, until stopped.

    ``on_queued_work`` is told when a tick queued tasks (the embedded worker claims them at
    once); ``on_fatal`` gets an error the loop cannot ride out (the database away past its
    limit), else ``run`` raises it. Each tick beats the scheduler's heartbeat first, at
    most every few seconds (``heartbeats.Pulse``): a tick stuck in a parse stops it too; a
    clean stop deletes it.
    """

    def __init__(
        self,
        scheduler: Scheduler,
        interval: float,
        *,
        on_queued_work: Callable[[], None] | None = None,
        on_fatal: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.interval = interval
        self.on_queued_work = on_queued_work
        self.on_fatal = on_fatal
        self._fatal: BaseException | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.clock = ClockWatch(scheduler.store)
        self.pulse = Pulse(Role.SCHEDULER)

    def stop(self) -> None:
        """Stop after the current tick (signal- and thread-safe)."""
        self._stop.set()

    def fail(self, error: BaseException) -> None:
        """This loop, or another of the process's (its upkeep), hit an error it cannot
        ride out: stop, and hand it on (``on_fatal``) or have ``run`` raise it."""
        if self._fatal is None:
            self._fatal = error
            if self.on_fatal is not None:
                self.on_fatal(error)
        self.stop()

    def start(self) -> None:
        """Tick on a thread of its own."""
        self._thread = threading.Thread(target=self.run, name="dagrun-scheduler", daemon=True)
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def run(self) -> None:
        health = self.scheduler.store.health
        ride_out(self._tick, self._stop, self.fail, health=health, what="tick")
        if self._fatal is None:
            self.pulse.forget(self.scheduler.store)
        elif self.on_fatal is None:
            raise self._fatal

    def _tick(self) -> float:
        """One tick; the seconds until the next."""
        started = time.monotonic()
        self.clock.check()
        self._beat()
        report = self.scheduler.tick()
        if report.queued_work and self.on_queued_work is not None:
            self.on_queued_work()
        return max(0.0, self.interval - (time.monotonic() - started))

    def _beat(self) -> None:
        """The scheduler's heartbeat, when one is due: a small transaction of its own."""
        if not self.pulse.due():
            return
        store = self.scheduler.store
        with store.write() as conn:
            self.pulse.beat(conn, store.now(conn), self.clock.offset)


def _admit_and_start(conn: Connection, spec: DagSpec, now: datetime) -> tuple[list[int], list[int]]:
    """One batch: waiting runs admitted within ``max_active_runs`` (at most
    ``ADMIT_PER_COMMIT``), then the queued runs due to start started."""
    admitted = runs.admit_runs(conn, spec, spec.max_active_runs, now, limit=ADMIT_PER_COMMIT)
    return admitted, runs.start_runs(conn, spec, now)

"""Run a set of runs of one DAG to their end, in this process: ``dagrun run`` and backfill.

The driver owns an embedded worker and watches it from a thread of its own. The worker
claims only the tasks of the driver's runs that are running (``scope``): `dagrun run A`
never executes a task of another DAG's run, nor of another run of A. Admission is
the driver's: its runs within its limit (``--max-active-runs``, newest first with
``--reverse``), done in the worker's commit hook when runs end, so the next runs' first
tasks are claimed in the same transaction, and on the watch thread's interval for anything
else (a slot freed elsewhere). The watch thread also shows progress, spots runs that cannot
go on (``depends_on_past`` tasks waiting on a past that did not succeed) and stops the
worker when every run has ended. Being the process's composer, the driver also starts its
one upkeep loop (``runtime.upkeep``): retries wake and expired leases are reaped with no
scheduler about.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from dagrun.errors import StoreError
from dagrun.parsing.spec import DagSpec
from dagrun.runtime.progress import Progress
from dagrun.runtime.upkeep import UpkeepLoop
from dagrun.runtime.worker import Worker, WorkerOptions, WorkerStats
from dagrun.states import RunState
from dagrun.store import Store, callbacks, operator_actions, pools, registry, run_reads, runs
from dagrun.store.attempts import Completion
from dagrun.store.outage import ride_out

if TYPE_CHECKING:
    from sqlalchemy import Connection

log = logging.getLogger("dagrun.driver")


@dataclass
class DriveResult:
    """What driving runs to their end did: runs and tasks by final state, and how long it took."""

    runs: Counter = field(default_factory=Counter)
    tasks: Counter = field(default_factory=Counter)
    seconds: float = 0.0
    worker: WorkerStats | None = None
    interrupted: bool = False
    stuck: list[datetime] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return self.runs.get(RunState.FAILED.value, 0) > 0 or self.interrupted or bool(self.stuck)


def _most_at_once(spec: DagSpec, run_pks: list[int]) -> int | None:
    """How many attempts of these runs could ever run at once: every task of every run;
    None when a task is mapped (its indexes are unknown until it expands). A one-task run
    needs one child, not one per core."""
    if spec.mapped_ids:
        return None
    return max(1, len(run_pks) * len(spec.tasks))


class RunDriver:
    """Run ``run_pks`` (runs of ``spec``) to their end with an embedded worker."""

    def __init__(
        self,
        store: Store,
        spec: DagSpec,
        run_pks: list[int],
        *,
        max_active_runs: int | None = None,
        workers: int | None = None,
        reverse: bool = False,
        progress: Progress | None = None,
        worker_options: WorkerOptions | None = None,
        watch_interval: float = 0.5,
    ):
        self.store = store
        self.spec = spec
        self.run_pks = run_pks
        self._ours = frozenset(run_pks)
        #: Runs not yet seen finished by this driver's commits: the full check of the store
        #: waits until none is left (the watcher's look catches runs others ended).
        self._unfinished = set(run_pks)
        self.max_active = max_active_runs or spec.max_active_runs
        self.reverse = reverse
        self.progress = progress
        self.options = worker_options or WorkerOptions()
        if workers:
            self.options.concurrency = workers
        most = _most_at_once(spec, run_pks)
        if most is not None:
            self.options.concurrency = min(self.options.concurrency, most)
        self.options.preload = (spec.fileloc,)
        self.watch_interval = watch_interval
        self.specs = registry.SpecCache()
        self.worker = Worker(
            store,
            self.options,
            on_commit=self._after_commit,
            scope=self._running_runs,
            callback_scope=lambda: self.run_pks,
        )
        self.upkeep = UpkeepLoop.beside(self.worker)
        self._running: set[int] = set()
        self._running_lock = threading.Lock()
        self._finished = False
        self._stuck: list[datetime] = []
        self._watching = threading.Event()
        self._warned_pools: set[str] = set()

    def run(self) -> DriveResult:
        started = time.monotonic()
        with self.store.write() as conn:
            self._admit(conn, self.store.now(conn))
        self.worker.fork_children()  # before this process has other threads (see there)
        watcher = threading.Thread(target=self._watch, name="dagrun-driver", daemon=True)
        watcher.start()
        try:
            with self.upkeep:
                stats = self.worker.run()
        finally:
            self._watching.set()
            watcher.join(10)
        result = self.summary()
        result.seconds = time.monotonic() - started
        result.worker = stats
        result.stuck = self._stuck
        result.interrupted = not (self._stuck or self._done_in_store())
        return result

    def stop(self) -> None:
        """Stop cleanly (signal-safe); a second call stops at once."""
        self.worker.stop()

    def _admit(self, conn: Connection, now: datetime) -> list[int]:
        """Admit this driver's waiting runs within its limit and start the due ones."""
        spec = self.spec = self.specs.get(conn, self.spec.dag_id)
        started = runs.admit_and_start(
            conn,
            spec,
            now,
            max_active=self.max_active,
            newest_first=self.reverse,
            run_pks=self._ours,
        )
        self._note_running(started)
        return started

    def _running_runs(self) -> list[int]:
        """The worker's scope: the driver's runs seen running (started here, or by a
        scheduler beside it), less those seen finished."""
        with self._running_lock:
            return sorted(self._running)

    def _note_running(self, started: Iterable[int], finished: Iterable[int] = ()) -> None:
        with self._running_lock:
            self._running.update(started)
            self._running.difference_update(finished)

    def _after_commit(self, conn: Connection, completion: Completion, now: datetime) -> None:
        """The worker's commit hook: runs ended, so admit the next ones; stop when all are
        done, their callbacks included."""
        self._note_running([], completion.finished_runs)
        self._unfinished.difference_update(completion.finished_runs)
        self._admit(conn, now)
        if not self._unfinished and self._all_done(conn):
            self._finished = True
            self.worker.stop()

    def _done_in_store(self) -> bool:
        """Whether the store says every run is done, read once the worker has stopped: the
        commit hook and the watcher decide to stop from inside transactions that may not
        have committed yet (a watcher's look can read just before the last commit lands, and
        a commit can fail in an outage), so neither decides what the command reports."""
        try:
            with self.store.read() as conn:
                return self._all_done(conn)
        except StoreError:
            return False

    def _all_done(self, conn: Connection) -> bool:
        """Every run ended, and every callback event of them delivered (or failed)."""
        return run_reads.all_finished(conn, self.run_pks) and not callbacks.outstanding(
            conn, self.run_pks
        )

    def _watch(self) -> None:
        """Look at once (progress shows from the start), then every ``watch_interval``."""
        health = self.store.health
        ride_out(
            self._look, self._watching, self.worker.fail, health=health, what="look at the runs"
        )

    def _look(self) -> float:
        """One look: fail runs past their dagrun_timeout, admit, spot stuck runs, warn of
        missing pools, show progress, and stop the worker when nothing is left to do;
        the seconds until the next."""
        with self.store.write() as conn:
            now = self.store.now(conn)
            operator_actions.time_out_runs(conn, self.spec, now)
            if self._admit(conn, now):
                self.worker.wake()
            self._warn_missing_pools(pools.missing_pools(conn))
        with self.store.read() as conn:
            self._note_running(run_reads.runs_in_state(conn, self.run_pks, RunState.RUNNING))
            ended = run_reads.all_finished(conn, self.run_pks)
            self._finished = ended and self._all_done(conn)
            self._stuck = [] if ended else self._find_stuck(conn)
        if self._finished or self._stuck:
            self.worker.stop()
        if self.progress is not None and self.progress.due():
            self.progress.update(self.summary())
        return self.watch_interval

    def _find_stuck(self, conn: Connection) -> list[datetime]:
        """The logical dates of runs that wait on a past that did not succeed while nothing
        else can move: only ``--rerun-failed`` (after fixing the cause) or ``clear`` helps."""
        dag_id = self.spec.dag_id
        if run_reads.has_pending_tasks(conn, dag_id):
            return []
        if run_reads.runs_in_state(conn, self.run_pks, RunState.QUEUED):
            return []
        now = self.store.now(conn)
        free = self.max_active - runs.count_active_runs(conn, dag_id)
        if runs.admissible(
            conn, self.spec, free, now, newest_first=self.reverse, run_pks=self.run_pks
        ):
            return []
        waiting = run_reads.runs_in_state(conn, self.run_pks, RunState.WAITING)
        blocked = [
            run_reads.run_by_pk(conn, pk)
            for pk in run_reads.runs_in_state(conn, self.run_pks, RunState.RUNNING) + waiting
        ]
        if any(r.not_before is not None and r.not_before > now for r in blocked):
            return []  # a run delayed to later (trigger --at): it waits, it is not stuck
        return sorted(r.logical_date for r in blocked)

    def _warn_missing_pools(self, missing: list[str]) -> None:
        """Warn of a missing pool only if this DAG's tasks name it."""
        ours = {t.pool for t in self.spec.tasks if t.pool}
        for name in sorted(set(missing) & ours - self._warned_pools):
            self._warned_pools.add(name)
            log.warning(
                "tasks of %s wait for pool '%s', which does not exist: create it with "
                "`dagrun pools set %s SLOTS`",
                self.spec.dag_id,
                name,
                name,
            )

    def summary(self) -> DriveResult:
        with self.store.read() as conn:
            return DriveResult(
                runs=run_reads.run_state_counts(conn, self.run_pks),
                tasks=run_reads.task_state_counts(conn, self.run_pks),
            )

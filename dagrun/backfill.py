"""Backfill: plan every scheduled date in a range, create or reset its run, run them all.

The plan is computed from the timetable and the runs that already exist, so the same
command is idempotent: successful runs are skipped, an interrupted backfill resumes where it
stopped (its runs are still waiting, queued or running), and a date never gets a second run.
Execution reuses the worker with a tick that admits this backfill's runs within
``max_active_runs`` (newest first with ``reverse``) and sweeps retries and expired leases.
With ``depends_on_past`` tasks a run is admitted only once its past succeeded, and a past
that failed ends the backfill (exit 1, the blocked dates named) instead of waiting forever.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from dagrun.errors import UsageError
from dagrun.scheduler import sweep
from dagrun.spec import DagSpec
from dagrun.states import FAILED_TASK_STATES, RunState, RunType, TaskState
from dagrun.store import Store, queries, registry, transitions
from dagrun.timetable import DataInterval
from dagrun.worker import Worker, WorkerOptions, WorkerStats


class Action(StrEnum):
    CREATE = "create"
    SKIP = "skip (already succeeded)"
    KEEP_FAILED = "skip (failed; use --rerun-failed or --reset)"
    RESUME = "resume"
    RERUN_FAILED = "rerun failed tasks"
    RESET = "reset and rerun"


class Mode(StrEnum):
    DEFAULT = "default"
    RERUN_FAILED = "rerun_failed"
    RESET = "reset"


@dataclass(frozen=True)
class PlanEntry:
    interval: DataInterval
    action: Action
    run_pk: int | None = None
    state: str | None = None


@dataclass
class Plan:
    spec: DagSpec
    start: datetime
    end: datetime
    entries: list[PlanEntry]

    @property
    def to_run(self) -> list[PlanEntry]:
        return [e for e in self.entries if e.action not in (Action.SKIP, Action.KEEP_FAILED)]

    def counts(self) -> Counter:
        return Counter(e.action for e in self.entries)


def make_plan(store: Store, spec: DagSpec, start: datetime, end: datetime, mode: Mode) -> Plan:
    """What backfill will do to each scheduled date in [start, end]; changes nothing."""
    intervals = list(spec.timetable.intervals(start, end))
    if not intervals:
        raise UsageError(
            f"no scheduled logical dates of '{spec.dag_id}' ({spec.schedule_text}) between "
            f"{start.isoformat()} and {end.isoformat()}"
        )
    with store.read() as conn:
        existing = {r.logical_date: r for r in queries.runs_between(conn, spec.dag_id, start, end)}
    entries = []
    for interval in intervals:
        run = existing.get(interval.start)
        action = _action(run.state if run else None, mode)
        entries.append(
            PlanEntry(interval, action, run.id if run else None, run.state if run else None)
        )
    return Plan(spec, start, end, entries)


def _action(state: str | None, mode: Mode) -> Action:
    if state is None:
        return Action.CREATE
    if mode == Mode.RESET:
        return Action.RESET
    if state == RunState.SUCCESS:
        return Action.SKIP
    if state == RunState.FAILED:
        return Action.RERUN_FAILED if mode == Mode.RERUN_FAILED else Action.KEEP_FAILED
    return Action.RESUME


@dataclass
class BackfillResult:
    runs: Counter = field(default_factory=Counter)
    tasks: Counter = field(default_factory=Counter)
    seconds: float = 0.0
    worker: WorkerStats | None = None
    interrupted: bool = False
    stuck: list[datetime] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return self.runs.get(RunState.FAILED.value, 0) > 0 or self.interrupted or bool(self.stuck)


def prepare(store: Store, plan: Plan) -> list[int]:
    """Create missing runs and reset the ones to rerun, in one transaction; their pks."""
    spec, entries = plan.spec, plan.to_run
    with store.write() as conn:
        now = store.now(conn)
        transitions.lock_dag(conn, store.caps, spec.dag_id, skip_locked=False)
        creates = [e.interval for e in entries if e.action == Action.CREATE]
        transitions.create_runs(conn, spec, creates, RunType.BACKFILL, now)
        by_date = {
            r.logical_date: r.id
            for r in queries.runs_between(conn, spec.dag_id, plan.start, plan.end)
        }
        run_pks = [by_date[e.interval.start] for e in entries]
        resets = {by_date[e.interval.start]: None for e in entries if e.action == Action.RESET}
        reruns = {
            e.run_pk: _failed_tasks(conn, e.run_pk)
            for e in entries
            if e.action == Action.RERUN_FAILED
        }
        transitions.clear_runs(conn, spec, {**resets, **reruns}, now)
        store.audit(
            conn,
            "backfill",
            spec.dag_id,
            start=plan.start,
            end=plan.end,
            runs=len(run_pks),
            actions={a.value: n for a, n in plan.counts().items()},
        )
    return run_pks


def _failed_tasks(conn, run_pk: int) -> set[str]:
    failed = {s.value for s in FAILED_TASK_STATES}
    return {t.task_id for t in queries.task_instances(conn, [run_pk]) if t.state in failed}


_PAST_OK = {TaskState.SUCCESS.value, TaskState.SKIPPED.value}


class RunDriver:
    """Run the given runs to the end with embedded workers: admit them within the limit
    (newest first with ``reverse``), start them, sweep retries and leases, show progress."""

    def __init__(
        self,
        store: Store,
        spec: DagSpec,
        run_pks: list[int],
        *,
        max_active_runs: int | None = None,
        workers: int | None = None,
        reverse: bool = False,
        progress=None,
        worker_options: WorkerOptions | None = None,
    ):
        self.store = store
        self.spec = spec
        self.run_pks = run_pks
        self.max_active = max_active_runs or spec.max_active_runs
        self.reverse = reverse
        self.progress = progress
        self.options = worker_options or WorkerOptions()
        if workers:
            self.options.concurrency = workers
        self.specs = registry.SpecCache()
        self.worker: Worker | None = None
        self._finished = False
        self._stuck: list[datetime] = []

    def run(self) -> BackfillResult:
        started = time.monotonic()
        self.worker = Worker(
            self.store,
            self.options,
            tick=self.tick,
            tick_interval=0.5,
            admit=self.admit,
            until=self.done,
        )
        stats = self.worker.run()
        result = self.summary()
        result.seconds = time.monotonic() - started
        result.worker = stats
        result.stuck = self._stuck
        result.interrupted = not (self._finished or self._stuck)
        return result

    def stop(self) -> None:
        if self.worker is not None:
            self.worker.stop()

    def tick(self) -> bool:
        """Admit and start runs, sweep retries and leases, spot stuck runs, show progress."""
        with self.store.write() as conn:
            now = self.store.now(conn)
            started = self.admit(conn, now)
            past_met = self._advance_past_waiters(conn, self.spec, now)
        requeued, reaped = sweep(self.store, self.specs)
        self._stuck = self._find_stuck(self.spec)
        if self.progress is not None and self.progress.due():
            self.progress.update(self.summary())
        return bool(started or past_met or requeued or reaped)

    def admit(self, conn, now: datetime) -> list[int]:
        """Under the DAG lock, admit waiting runs within the limit and start them; the worker
        also calls this inside the group commit that finished runs."""
        transitions.lock_dag(conn, self.store.caps, self.spec.dag_id, skip_locked=False)
        spec = self.spec = self.specs.get(conn, self.spec.dag_id)
        transitions.admit_runs(
            conn,
            spec,
            self.max_active,
            now,
            newest_first=self.reverse,
            run_pks=self._admissible(conn, spec),
        )
        return transitions.start_runs(conn, spec, now)

    def _admissible(self, conn, spec: DagSpec) -> list[int]:
        """The waiting runs that may take a slot. With depends_on_past tasks, only the oldest,
        once its previous run's instances of those tasks succeeded or were skipped: a run
        must not hold a max_active_runs slot waiting on a past that may still fail."""
        on_past = [t.task_id for t in spec.tasks if t.depends_on_past]
        if not on_past:
            return self.run_pks
        waiting = queries.runs_in_state(conn, self.run_pks, RunState.WAITING)
        if not waiting:
            return waiting
        first = queries.run_by_pk(conn, waiting[0])
        past = queries.previous_task_states(conn, spec.dag_id, first.logical_date, on_past)
        return waiting[:1] if set(past.values()) <= _PAST_OK else []

    def _advance_past_waiters(self, conn, spec: DagSpec, now: datetime) -> bool:
        """Re-evaluate running runs whose depends_on_past tasks wait (resumed ones): the
        previous run may have got on since, and a completion only advances its own run."""
        if not any(t.depends_on_past for t in spec.tasks):
            return False
        running = queries.runs_in_state(conn, self.run_pks, RunState.RUNNING)
        return any(transitions.advance_run(conn, pk, spec, now).queue for pk in running)

    def _find_stuck(self, spec: DagSpec) -> list[datetime]:
        """The logical dates of runs that wait on a past that did not succeed while nothing
        else can move: only ``--rerun-failed`` (after fixing the cause) or ``clear`` helps."""
        with self.store.read() as conn:
            if queries.has_pending_tasks(conn, spec.dag_id):
                return []
            if queries.runs_in_state(conn, self.run_pks, RunState.QUEUED):
                return []
            free = transitions.count_active_runs(conn, spec.dag_id) < self.max_active
            if free and self._admissible(conn, spec):
                return []
            blocked = queries.runs_in_state(conn, self.run_pks, RunState.RUNNING)
            blocked += queries.runs_in_state(conn, self.run_pks, RunState.WAITING)
            return sorted(queries.run_by_pk(conn, pk).logical_date for pk in blocked)

    def done(self) -> bool:
        with self.store.read() as conn:
            self._finished = queries.all_finished(conn, self.run_pks)
        return self._finished or bool(self._stuck)

    def summary(self) -> BackfillResult:
        with self.store.read() as conn:
            return BackfillResult(
                runs=queries.run_state_counts(conn, self.run_pks),
                tasks=queries.task_state_counts(conn, self.run_pks),
            )

"""Backfill: plan every scheduled date in a range, create or reset its run, run them all.

The plan is computed from the timetable and the runs that already exist, so the same
command is idempotent: successful runs are skipped, an interrupted backfill resumes where it
stopped (its runs are still waiting, queued or running), and a date never gets a second run.
Execution reuses the worker with a tick that admits this backfill's runs within
``max_active_runs`` (newest first with ``reverse``) and sweeps retries and expired leases.
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
from dagrun.states import FAILED_TASK_STATES, RunState, RunType
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

    @property
    def failed(self) -> bool:
        return self.runs.get(RunState.FAILED.value, 0) > 0 or self.interrupted


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

    def run(self) -> BackfillResult:
        started = time.monotonic()
        self.worker = Worker(
            self.store, self.options, tick=self.tick, tick_interval=0.5, until=self.done
        )
        stats = self.worker.run()
        result = self.summary()
        result.seconds = time.monotonic() - started
        result.worker = stats
        result.interrupted = not self._finished
        return result

    def stop(self) -> None:
        if self.worker is not None:
            self.worker.stop()

    def tick(self) -> bool:
        with self.store.write() as conn:
            now = self.store.now(conn)
            transitions.lock_dag(conn, self.store.caps, self.spec.dag_id, skip_locked=False)
            spec = self.specs.get(conn, self.spec.dag_id)
            transitions.admit_runs(
                conn, spec, self.max_active, now, newest_first=self.reverse, run_pks=self.run_pks
            )
            started = transitions.start_runs(conn, spec, now)
        requeued, reaped = sweep(self.store, self.specs)
        if self.progress is not None:
            self.progress.update(self.summary())
        return bool(started or requeued or reaped)

    def done(self) -> bool:
        with self.store.read() as conn:
            self._finished = queries.all_finished(conn, self.run_pks)
        return self._finished

    def summary(self) -> BackfillResult:
        with self.store.read() as conn:
            return BackfillResult(
                runs=queries.run_state_counts(conn, self.run_pks),
                tasks=queries.task_state_counts(conn, self.run_pks),
            )

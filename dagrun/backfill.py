"""Backfill: plan every scheduled date in a range, then create or reset the runs to run.

The plan is computed from the timetable and the runs that already exist, so the same
command is idempotent: successful runs are skipped, an interrupted backfill resumes where it
stopped (its runs are still waiting, queued or running), and a date never gets a second run.
``driver.RunDriver`` then runs them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from dagrun.errors import UsageError
from dagrun.spec import DagSpec
from dagrun.states import FAILED_TASK_STATES, RunState, RunType
from dagrun.store import Store, audit, reads, runs
from dagrun.timetable import DataInterval


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
        existing = {r.logical_date: r for r in reads.runs_between(conn, spec.dag_id, start, end)}
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


def prepare(store: Store, plan: Plan) -> list[int]:
    """Create missing runs and reset the ones to rerun, in one transaction; their pks."""
    spec, entries = plan.spec, plan.to_run
    with store.write() as conn:
        now = store.now(conn)
        runs.lock_dag(conn, spec.dag_id)
        creates = [e.interval for e in entries if e.action == Action.CREATE]
        runs.create_runs(conn, spec, creates, RunType.BACKFILL, now)
        by_date = {
            r.logical_date: r.id
            for r in reads.runs_between(conn, spec.dag_id, plan.start, plan.end)
        }
        run_pks = [by_date[e.interval.start] for e in entries]
        resets = {by_date[e.interval.start]: None for e in entries if e.action == Action.RESET}
        reruns = {
            e.run_pk: _failed_tasks(conn, e.run_pk)
            for e in entries
            if e.action == Action.RERUN_FAILED
        }
        runs.clear_runs(conn, spec, {**resets, **reruns}, now)
        audit.record(
            store,
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
    return {t.task_id for t in reads.task_instances(conn, [run_pk]) if t.state in failed}

"""Backfill: plan every scheduled date in a range, then create or reset the runs to run.

The plan is computed from the timetable and the runs that already exist, so the same
command is idempotent: successful runs are skipped, an interrupted backfill resumes where it
stopped (its runs are still waiting, queued or running), and a date never gets a second run.
``driver.RunDriver`` then runs them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from itertools import chain, islice
from typing import TYPE_CHECKING

from dagrun.errors import UsageError
from dagrun.parsing.spec import DagSpec
from dagrun.states import FAILED_TASK_STATES, RunState, RunType
from dagrun.store import Store, audit, run_reads, runs, task_reads
from dagrun.store.outage import damaged
from dagrun.timing.timetable import DataInterval

if TYPE_CHECKING:
    from sqlalchemy import Connection


class Action(StrEnum):
    CREATE = "create"
    SKIP = "skip (already succeeded)"
    KEEP_FAILED = "skip (failed; use --rerun-failed or --reset)"
    RESUME = "resume"
    RERUN_FAILED = "rerun failed tasks"
    RESET = "reset and rerun"


#: The actions that make the backfill run something (the others leave a date alone).
RUNNING_ACTIONS = frozenset({Action.CREATE, Action.RESUME, Action.RERUN_FAILED, Action.RESET})


class Mode(StrEnum):
    DEFAULT = "default"
    RERUN_FAILED = "rerun_failed"
    RESET = "reset"


@dataclass(frozen=True)
class PlanEntry:
    """One interval of a backfill and what the backfill does with it."""

    interval: DataInterval
    action: Action
    run_pk: int | None = None
    state: str | None = None


@dataclass
class Plan:
    """What a backfill of ``spec`` from ``start`` to ``end`` will do, interval by interval."""

    spec: DagSpec
    start: datetime
    end: datetime
    entries: list[PlanEntry]

    @property
    def to_run(self) -> list[PlanEntry]:
        return [e for e in self.entries if e.action in RUNNING_ACTIONS]

    def counts(self) -> Counter:
        return Counter(e.action for e in self.entries)


#: Existing runs are read for this many scheduled dates at a time (one range query each), so
#: a plan over millions of dates never holds all of its runs in memory.
PAGE_DATES = 1000


def make_plan(store: Store, spec: DagSpec, start: datetime, end: datetime, mode: Mode) -> Plan:
    """What backfill will do to each scheduled date in [start, end]; changes nothing."""
    return Plan(spec, start, end, list(stream_plan(store, spec, start, end, mode)))


def stream_plan(
    store: Store, spec: DagSpec, start: datetime, end: datetime, mode: Mode
) -> Iterator[PlanEntry]:
    """The plan one date at a time, oldest first, for ``--dry-run`` and for counting: a range
    of centuries is printed as it is planned instead of first filling memory. Raises
    ``UsageError`` at once (before anything is printed) when no date is scheduled."""
    entries = _entries(store, spec, start, end, mode)
    first = next(entries, None)
    if first is None:
        raise UsageError(
            f"no scheduled logical dates of '{spec.dag_id}' ({spec.schedule_text}) between "
            f"{start.isoformat()} and {end.isoformat()}"
        )
    return chain([first], entries)


def count_to_run(
    store: Store, spec: DagSpec, start: datetime, end: datetime, mode: Mode, limit: int
) -> int:
    """How many runs the backfill would run, counting no further than ``limit``: enough to
    decide whether to ask first, without planning every date of a huge range twice."""
    entries = _entries(store, spec, start, end, mode)
    return sum(1 for _ in islice((e for e in entries if e.action in RUNNING_ACTIONS), limit))


def _entries(
    store: Store, spec: DagSpec, start: datetime, end: datetime, mode: Mode
) -> Iterator[PlanEntry]:
    """Each scheduled date with its action; the runs already there are read one page of
    dates at a time, each page in one short read transaction."""
    intervals = _representable(spec.timetable.intervals(start, end))
    while page := list(islice(intervals, PAGE_DATES)):
        with store.read() as conn:
            found = run_reads.runs_between(
                conn, spec.dag_id, page[0].start, page[-1].start, scheduled=True
            )
        existing = {r.logical_date: r for r in found}
        for interval in page:
            run = existing.get(interval.start)
            state = run.state if run else None
            yield PlanEntry(interval, _action(state, mode), run.id if run else None, state)


def _representable(intervals: Iterator[DataInterval]) -> Iterator[DataInterval]:
    """The intervals up to the last one ``datetime`` can hold. A timedelta schedule computes
    the end of an interval starting in 9999-12-31 by overflowing; such a run cannot exist, so
    the dates end there instead of the command crashing."""
    while True:
        try:
            interval = next(intervals)
        except (StopIteration, OverflowError):
            return
        yield interval


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
    """Create missing runs and reset the ones to rerun, in one transaction; their pks.

    A page of dates at a time: the rows to insert and the runs read back are a page's, so
    a backfill of decades does not first hold every run's row in memory (its worker
    children, forked after this, would carry those pages too).
    """
    spec, entries = plan.spec, plan.to_run
    with store.write() as conn:
        now = store.now(conn)
        runs.lock_dag(conn, spec.dag_id)
        run_pks: list[int] = []
        for start in range(0, len(entries), PAGE_DATES):
            run_pks += _prepare_page(conn, spec, entries[start : start + PAGE_DATES], now)
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


def _prepare_page(
    conn: Connection, spec: DagSpec, entries: list[PlanEntry], now: datetime
) -> list[int]:
    """One page of ``prepare``: its runs created or reset, and their pks in date order."""
    creates = [e.interval for e in entries if e.action == Action.CREATE]
    runs.create_runs(conn, spec, creates, RunType.BACKFILL, now)
    first, last = entries[0].interval.start, entries[-1].interval.start
    by_date = {
        r.logical_date: r.id
        for r in run_reads.runs_between(conn, spec.dag_id, first, last, scheduled=True)
    }
    missing = [e.interval.start for e in entries if e.interval.start not in by_date]
    if missing:
        raise damaged(conn, f"the run of {missing[0].isoformat()} was written but is not found")
    run_pks = [by_date[e.interval.start] for e in entries]
    cleared: dict[int, set[str] | None] = {}
    for e in entries:
        run_pk = by_date[e.interval.start]
        if e.action == Action.RESET:
            cleared[run_pk] = None
        elif e.action == Action.RERUN_FAILED:
            cleared[run_pk] = _failed_tasks(conn, run_pk)
    from dagrun.store import operator_actions  # a rerun of finished dates only

    operator_actions.clear_runs(conn, spec, cleared, now)
    return run_pks


def _failed_tasks(conn, run_pk: int) -> set[str]:
    failed = {s.value for s in FAILED_TASK_STATES}
    return {t.task_id for t in task_reads.task_instances(conn, [run_pk]) if t.state in failed}

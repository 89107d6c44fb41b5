"""Reads of task instances and their history: the grid's cells, a task's instance, attempts
and dead letters for the CLI and the web page; and for the workers' loops, which of their
completions were stale (``HOLDERS``), which attempts an operator ended (``STOPPED_ATTEMPTS``)
and the callbacks of a run or an attempt. None of them changes or locks a row: a worker's
decisions are the catalogue's guarded updates (``statements``), these only inform them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import reduce
from typing import TYPE_CHECKING

from dagrun.errors import DagrunError, TaskNotFound, UsageError
from dagrun.states import TaskState, merged
from dagrun.store import sql
from dagrun.store.run_reads import RunRow, run_page

if TYPE_CHECKING:
    from sqlalchemy import Connection


#: The statements of this module (``queries/task_reads.py``).
Q = sql.Catalogue("dagrun.store.queries.task_reads", "task_reads.")


# ---------------------------------------------------------------- task instances


@dataclass(frozen=True)
class TaskRow:
    """A task instance as the store holds it."""

    id: int
    run_pk: int
    task_id: str
    state: str
    try_number: int
    max_tries: int
    start_date: datetime | None
    end_date: datetime | None
    duration: float | None
    last_error: str | None
    fence_token: int
    lease_owner: str | None
    map_index: int = -1
    #: When its current try was queued (the Gantt's wait before the bar); None once cleared.
    queued_at: datetime | None = None

    @property
    def set_without_a_try(self) -> bool:
        """Whether its state was set, with a note saying why, without a try reaching it: by
        an operator (a mark, a cancel), a run's timeout, or a mapped task whose upstream
        value could not be mapped. Such a state has an end but no start and no duration
        (``statements.MARK_TASKS``); readiness's own decisions carry no note."""
        return (
            self.start_date is None
            and self.end_date is not None
            and self.last_error is not None
            and TaskState(self.state).finished
        )


def task_instances(
    conn: Connection, run_pks: list[int], order: Sequence[str] = ()
) -> list[TaskRow]:
    """The task instances of many runs in one query, by run: in the task order ``order``
    (a spec's), then in the order each task's first instance was made; a mapped task's
    indexes together and in order."""
    if not run_pks:
        return []
    rows = [TaskRow(*r) for r in sql.tuples(conn, Q.TASKS_OF_RUNS, {"b_run_pks": run_pks})]
    position = {task_id: i for i, task_id in enumerate(order)}
    first: dict[tuple[int, str], int] = {}
    for r in rows:
        first.setdefault((r.run_pk, r.task_id), r.id)
    return sorted(
        rows,
        key=lambda r: (
            r.run_pk,
            position.get(r.task_id, len(position)),
            first[r.run_pk, r.task_id],
            r.map_index,
        ),
    )


class MappedTaskError(UsageError):
    """A mapped task has several instances in a run: the operator must pick one."""

    def __init__(self, task_id: str, indexes: list[int]):
        super().__init__(
            f"task '{task_id}' is mapped ({len(indexes)} instances, "
            f"indexes {indexes[0]}..{indexes[-1]}): pick one with --map-index"
        )
        self.task_id = task_id


def task_instance(
    conn: Connection, run: RunRow, task_id: str, map_index: int | None = None
) -> TaskRow:
    """The task's instance in the run; a mapped task's index ``map_index`` (which may be
    left out only when the task has a single instance)."""
    params = {"b_run_pk": run.id, "b_task_id": task_id}
    rows = [TaskRow(*r) for r in sql.tuples(conn, Q.TASK_OF_RUN, params)]
    if map_index is not None:
        rows = [r for r in rows if r.map_index == map_index]
        if not rows:
            raise UsageError(f"task '{task_id}' has no map index {map_index} in this run")
    if not rows:
        raise TaskNotFound(run.dag_id, task_id)
    if len(rows) > 1:
        raise MappedTaskError(task_id, [r.map_index for r in rows])
    return rows[0]


# ---------------------------------------------------------------- the grid


@dataclass(frozen=True)
class Cell:
    """What one grid cell needs from a task instance (not its error or return value)."""

    run_pk: int
    task_id: str
    state: str
    try_number: int
    max_tries: int
    start_date: datetime | None
    duration: float | None
    map_index: int = -1


@dataclass(frozen=True)
class GridPage:
    """A page of runs (oldest first) with their cells and the cursors to the next pages.

    ``older_before`` is the ``before`` of the page of older runs (None: there are none);
    ``has_newer`` says whether newer runs exist, ``newer_before`` is the ``before`` of their
    page (None: the newer page is the latest one). A mapped task has one merged cell per
    run, its instances counted by state in ``counts``; the cells of each index are kept
    (in ``indexes``) only for the tasks the page expands.
    """

    runs: list[RunRow]
    cells: dict[tuple[int, str], Cell]
    older_before: datetime | None
    has_newer: bool
    newer_before: datetime | None
    counts: dict[tuple[int, str], Counter]
    indexes: dict[tuple[int, str], list[Cell]]

    def cell(self, run_pk: int, task_id: str) -> Cell | None:
        return self.cells.get((run_pk, task_id))

    @property
    def task_ids(self) -> set[str]:
        return {task_id for _, task_id in self.cells}

    @property
    def mapped_ids(self) -> set[str]:
        """The tasks expanded into indexes in some run of the page."""
        return {task_id for _, task_id in self.counts}


def grid_page(
    conn: Connection,
    dag_id: str,
    before: datetime | None,
    limit: int,
    expand: frozenset[str] = frozenset(),
) -> GridPage:
    """The ``limit`` newest runs with logical date before ``before`` and their cells: three
    indexed statements whatever the DAG's history (runs, the newer page, the cells).

    The cells statement already returns every index of a mapped task, so their counts by
    state and the index cells of the ``expand`` tasks cost no statement of their own.
    """
    page, older = run_page(conn, dag_id, before, limit)
    has_newer, newer_before = _newer_page(conn, dag_id, page, before, limit)
    cells: dict[tuple[int, str], Cell] = {}
    mapped: dict[tuple[int, str], list[Cell]] = {}
    for c in grid_cells(conn, [r.id for r in page]):
        if c.map_index < 0:
            cells[c.run_pk, c.task_id] = c
        else:
            mapped.setdefault((c.run_pk, c.task_id), []).append(c)
    counts = {}
    for key, instances in mapped.items():
        cells[key] = reduce(_merged_cell, instances)
        counts[key] = Counter(c.state for c in instances)
    indexes = {key: found for key, found in mapped.items() if key[1] in expand}
    return GridPage(page, cells, older, has_newer, newer_before, counts, indexes)


def _merged_cell(known: Cell, other: Cell) -> Cell:
    """One cell for a mapped task's instances: the state they add up to, the most tries,
    the earliest start, the longest duration and the lowest index (the one it links to)."""
    starts = [d for d in (known.start_date, other.start_date) if d is not None]
    durations = [d for d in (known.duration, other.duration) if d is not None]
    return Cell(
        known.run_pk,
        known.task_id,
        merged(TaskState(known.state), TaskState(other.state)).value,
        max(known.try_number, other.try_number),
        max(known.max_tries, other.max_tries),
        min(starts) if starts else None,
        max(durations) if durations else None,
        min(known.map_index, other.map_index),
    )


def _newer_page(
    conn: Connection, dag_id: str, page: list[RunRow], before: datetime | None, limit: int
) -> tuple[bool, datetime | None]:
    """Whether runs newer than this page exist, and the ``before`` that shows the next
    ``limit`` of them (None when they reach the newest run: the latest page needs none)."""
    if before is None:
        return False, None
    after = page[-1].logical_date if page else before - timedelta(microseconds=1)
    params = {"b_dag_id": dag_id, "b_after": after, "b_limit": limit + 1}
    newer = sql.scalars(conn, Q.NEWER_DATES, params)
    if not newer:
        return False, None
    return True, newer[limit] if len(newer) > limit else None


def grid_cells(conn: Connection, run_pks: list[int]) -> list[Cell]:
    """The cells of many runs in one query, through the (run_pk, task_id) key."""
    if not run_pks:
        return []
    return [Cell(*r) for r in sql.tuples(conn, Q.CELLS, {"b_run_pks": run_pks})]


# ---------------------------------------------------------------- attempts and dead letters


@dataclass(frozen=True)
class AttemptRow:
    """One attempt from the history: who ran it, under which fence, and how it ended."""

    task_id: str
    try_number: int
    fence_token: int
    worker: str
    started_at: datetime
    ended_at: datetime | None
    outcome: str | None
    error: str | None
    log_path: str | None
    log_offset: int | None
    log_length: int | None
    late_result: str | None = None
    ti_id: int = 0


class AttemptNotFound(DagrunError, LookupError):
    """No attempt with this try number exists for the task instance."""

    def __init__(self, dag_id: str, task_id: str, try_number: int):
        super().__init__(f"{dag_id}.{task_id} has no try {try_number}")
        self.dag_id = dag_id
        self.task_id = task_id
        self.try_number = try_number


def attempts(conn: Connection, ti_id: int) -> list[AttemptRow]:
    return [AttemptRow(*r) for r in sql.tuples(conn, Q.TASK_ATTEMPTS, {"b_ti_id": ti_id})]


def run_attempts(conn: Connection, run_pk: int) -> dict[int, list[AttemptRow]]:
    """Every attempt of one run, by task instance, in the order they started."""
    found: dict[int, list[AttemptRow]] = {}
    for row in sql.tuples(conn, Q.RUN_ATTEMPTS, {"b_run_pk": run_pk}):
        attempt = AttemptRow(*row)
        found.setdefault(attempt.ti_id, []).append(attempt)
    return found


def attempt(
    conn: Connection, dag_id: str, run_pk: int, task_id: str, try_number: int, ti_id: int
) -> AttemptRow:
    """One attempt of the task instance ``ti_id``, named by its try number (the latest
    record if a try was released)."""
    params = {"b_run_pk": run_pk, "b_task_id": task_id, "b_ti_id": ti_id}
    found = sql.tuples(conn, Q.ATTEMPT, {**params, "b_try_number": try_number})
    if not found:
        raise AttemptNotFound(dag_id, task_id, try_number)
    return AttemptRow(*found[0])


@dataclass(frozen=True)
class DeadLetter:
    """A task instance that failed for good, with its last error."""

    dag_id: str
    task_id: str
    run_id: str
    logical_date: datetime
    try_number: int
    error: str | None
    map_index: int = -1


def dead_letters(conn: Connection, dag_id: str | None = None) -> list[DeadLetter]:
    """Task instances that failed for good, with their last error (newest date last)."""
    if dag_id:
        return [DeadLetter(*r) for r in sql.tuples(conn, Q.DAG_DEAD_LETTERS, {"b_dag_id": dag_id})]
    return [DeadLetter(*r) for r in sql.tuples(conn, Q.DEAD_LETTERS)]


# ---------------------------------------------------------------- what the workers decide from

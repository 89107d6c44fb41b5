"""Reads of task instances and their history: the grid's cells, a task's instance, attempts
and dead letters for the CLI and the web page; and for the workers' loops, which of their
completions were stale (``HOLDERS``), which attempts an operator ended (``STOPPED_ATTEMPTS``)
and the callbacks of a run or an attempt. None of them changes or locks a row: a worker's
decisions are the catalogue's guarded updates (``statements``), these only inform them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from functools import reduce

from sqlalchemy import Connection, func, select

from dagrun.errors import DagrunError, TaskNotFound, UsageError
from dagrun.states import AttemptOutcome, CallbackState, TaskState, merged
from dagrun.store import sql
from dagrun.store.run_reads import RunRow, run_page
from dagrun.store.schema import callback, dag_run, in_state, task_attempt
from dagrun.store.schema import task_instance as ti
from dagrun.store.sql import Statement, name_all
from dagrun.store.sql import bind as _b
from dagrun.store.sql import bind_list as _many


def _columns(table, row_type) -> list:
    return [table.c[f.name] for f in fields(row_type)]


# ---------------------------------------------------------------- task instances


@dataclass(frozen=True)
class TaskRow:
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


_TASKS = select(*_columns(ti, TaskRow))

_TASKS_OF_RUNS = Statement(
    "The task instances of these runs, by run and in the order they were made.",
    _TASKS.where(ti.c.run_pk.in_(_many("run_pks"))).order_by(ti.c.run_pk, ti.c.id),
)


def task_instances(
    conn: Connection, run_pks: list[int], order: Sequence[str] = ()
) -> list[TaskRow]:
    """The task instances of many runs in one query, by run: in the task order ``order``
    (a spec's), then in the order each task's first instance was made; a mapped task's
    indexes together and in order."""
    if not run_pks:
        return []
    rows = [TaskRow(*r) for r in sql.tuples(conn, _TASKS_OF_RUNS, {"b_run_pks": run_pks})]
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


_TASK_OF_RUN = Statement(
    "A task's instances in one run, by map index.",
    _TASKS.where(ti.c.run_pk == _b("run_pk"), ti.c.task_id == _b("task_id")).order_by(
        ti.c.map_index
    ),
)


def task_instance(
    conn: Connection, run: RunRow, task_id: str, map_index: int | None = None
) -> TaskRow:
    """The task's instance in the run; a mapped task's index ``map_index`` (which may be
    left out only when the task has a single instance)."""
    params = {"b_run_pk": run.id, "b_task_id": task_id}
    rows = [TaskRow(*r) for r in sql.tuples(conn, _TASK_OF_RUN, params)]
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
    newer = sql.scalars(conn, _NEWER_DATES, params)
    if not newer:
        return False, None
    return True, newer[limit] if len(newer) > limit else None


_NEWER_DATES = Statement(
    "A DAG's next ``b_limit`` logical dates after ``b_after``, oldest first.",
    select(dag_run.c.logical_date)
    .where(dag_run.c.dag_id == _b("dag_id"), dag_run.c.logical_date > _b("after"))
    .order_by(dag_run.c.logical_date)
    .limit(_b("limit")),
)


def grid_cells(conn: Connection, run_pks: list[int]) -> list[Cell]:
    """The cells of many runs in one query, through the (run_pk, task_id) key."""
    if not run_pks:
        return []
    return [Cell(*r) for r in sql.tuples(conn, _CELLS, {"b_run_pks": run_pks})]


_CELLS = Statement(
    "The grid cells of some runs.",
    select(*_columns(ti, Cell)).where(ti.c.run_pk.in_(_many("run_pks"))),
)


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


_ATTEMPTS = select(*_columns(task_attempt, AttemptRow))
_TASK_ATTEMPTS = Statement(
    "The attempts of one task instance, in the order they started.",
    _ATTEMPTS.where(task_attempt.c.ti_id == _b("ti_id")).order_by(task_attempt.c.id),
)
_RUN_ATTEMPTS = Statement(
    "The attempts of one run, in the order they started.",
    _ATTEMPTS.where(task_attempt.c.run_pk == _b("run_pk")).order_by(task_attempt.c.id),
)
_ATTEMPT = Statement(
    "A task instance's latest attempt of one try number.",
    _ATTEMPTS.where(
        task_attempt.c.run_pk == _b("run_pk"),
        task_attempt.c.task_id == _b("task_id"),
        task_attempt.c.ti_id == _b("ti_id"),
        task_attempt.c.try_number == _b("try_number"),
    )
    .order_by(task_attempt.c.id.desc())
    .limit(1),
)


class AttemptNotFound(DagrunError, LookupError):
    """No attempt with this try number exists for the task instance."""

    def __init__(self, dag_id: str, task_id: str, try_number: int):
        super().__init__(f"{dag_id}.{task_id} has no try {try_number}")
        self.dag_id = dag_id
        self.task_id = task_id
        self.try_number = try_number


def attempts(conn: Connection, ti_id: int) -> list[AttemptRow]:
    return [AttemptRow(*r) for r in sql.tuples(conn, _TASK_ATTEMPTS, {"b_ti_id": ti_id})]


def run_attempts(conn: Connection, run_pk: int) -> dict[int, list[AttemptRow]]:
    """Every attempt of one run, by task instance, in the order they started."""
    found: dict[int, list[AttemptRow]] = {}
    for row in sql.tuples(conn, _RUN_ATTEMPTS, {"b_run_pk": run_pk}):
        attempt = AttemptRow(*row)
        found.setdefault(attempt.ti_id, []).append(attempt)
    return found


def attempt(
    conn: Connection, dag_id: str, run_pk: int, task_id: str, try_number: int, ti_id: int
) -> AttemptRow:
    """One attempt of the task instance ``ti_id``, named by its try number (the latest
    record if a try was released)."""
    params = {"b_run_pk": run_pk, "b_task_id": task_id, "b_ti_id": ti_id}
    found = sql.tuples(conn, _ATTEMPT, {**params, "b_try_number": try_number})
    if not found:
        raise AttemptNotFound(dag_id, task_id, try_number)
    return AttemptRow(*found[0])


@dataclass(frozen=True)
class DeadLetter:
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
        return [DeadLetter(*r) for r in sql.tuples(conn, _DAG_DEAD_LETTERS, {"b_dag_id": dag_id})]
    return [DeadLetter(*r) for r in sql.tuples(conn, _DEAD_LETTERS)]


_DEAD = (
    select(ti.c.dag_id, ti.c.task_id, *dag_run.c["run_id", "logical_date"])
    .add_columns(ti.c.try_number, ti.c.last_error, ti.c.map_index)
    .join(dag_run, dag_run.c.id == ti.c.run_pk)
    .where(in_state(TaskState.FAILED))
    .order_by(ti.c.dag_id, dag_run.c.logical_date, ti.c.task_id, ti.c.map_index)
)
_DEAD_LETTERS = Statement("Every task instance that failed for good.", _DEAD)
_DAG_DEAD_LETTERS = Statement(
    "A DAG's task instances that failed for good.", _DEAD.where(ti.c.dag_id == _b("dag_id"))
)


# ---------------------------------------------------------------- what the workers decide from

_OPEN_CALLBACKS = [CallbackState.PENDING.value, CallbackState.RUNNING.value]

STOPPED_ATTEMPTS = Statement(
    "Which of a worker's attempts were ended by hand (cancel, mark): ended with an outcome "
    "other than an expired lease; their worker stops them.",
    select(task_attempt.c.ti_id, task_attempt.c.fence_token).where(
        task_attempt.c.ti_id.in_(_many("ti_ids")),
        task_attempt.c.outcome.is_not(None),
        task_attempt.c.outcome != AttemptOutcome.LEASE_EXPIRED.value,
    ),
)
HOLDERS = Statement(
    "Fence and state of some task instances (which completions of a batch were stale).",
    select(ti.c.id, ti.c.fence_token, ti.c.state).where(ti.c.id.in_(_many("ti_ids"))),
)
RUN_OF_TASK = Statement(
    "The run a task instance belongs to.",
    select(ti.c.run_pk).where(ti.c.id == _b("ti_id")),
)
MAP_INDEXES = Statement(
    "The map index of some task instances (a mapped task's events name their index).",
    select(ti.c.id, ti.c.map_index).where(ti.c.id.in_(_many("ti_ids"))),
)
RUN_CALLBACKS = Statement(
    "The callbacks of one run, oldest first, with the map index of a task event's instance.",
    select(
        *callback.c["id", "event", "state", "task_id", "try_number", "error", "outcome_error"],
        *callback.c["created_at", "ended_at", "log_path", "log_offset", "log_length"],
        func.coalesce(ti.c.map_index, -1).label("map_index"),
    )
    .select_from(callback.outerjoin(ti, ti.c.id == callback.c.ti_id))
    .where(callback.c.run_pk == _b("run_pk"))
    .order_by(callback.c.id),
)
OUTSTANDING_CALLBACKS = Statement(
    "A callback of these runs still pending or running (a driver waits for them to end).",
    select(callback.c.id)
    .where(callback.c.run_pk.in_(_many("run_pks")), callback.c.state.in_(_OPEN_CALLBACKS))
    .limit(1),
)
ATTEMPT_CALLBACKS = Statement(
    "The callbacks an attempt fired, in order, with how they ended and their log ranges.",
    select(
        *callback.c["id", "event", "state", "outcome_error", "ended_at"],
        *callback.c["log_path", "log_offset", "log_length"],
    )
    .where(callback.c.ti_id == _b("ti_id"), callback.c.fence_token == _b("fence"))
    .order_by(callback.c.id),
)


name_all(globals(), prefix="task_reads.")

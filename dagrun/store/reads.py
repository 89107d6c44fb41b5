"""Every read the command line, the web page and the runtime's own loops make.

Nothing here changes state or locks a row. Each read is batched (one statement per view,
never one per row or cell) and served by an index, so a DAG with ten thousand runs reads as
fast as a new one; the web page reads inside one short read transaction (a WAL snapshot on
SQLite) and renders after it ends.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from functools import reduce

from sqlalchemy import BindParameter, Connection, Select, func, literal_column, select, union_all

from dagrun.errors import DagNotFound, DagrunError, RunNotFound, TaskNotFound, UsageError
from dagrun.parsing.spec import DagSpec, spec_from
from dagrun.states import ACTIVE_RUN_STATES, RunState, RunType, TaskState, merged
from dagrun.store import sql
from dagrun.store.schema import dag, dag_file, dag_run, in_state, pool, task_attempt
from dagrun.store.schema import task_instance as ti
from dagrun.store.sql import Statement, name_all
from dagrun.store.sql import bind as _b
from dagrun.store.sql import bind_list as _many

#: SQLite refuses compound SELECTs of more than 500 terms; stay well below.
_UNION_CHUNK = 200
_ACTIVE = [s.value for s in ACTIVE_RUN_STATES]
_UNFINISHED = [s.value for s in (RunState.WAITING, RunState.QUEUED, RunState.RUNNING)]
_PENDING = [
    s.value
    for s in (
        TaskState.QUEUED,
        TaskState.RUNNING,
        TaskState.UP_FOR_RETRY,
        TaskState.UP_FOR_RESCHEDULE,
    )
]


def _one(conn: Connection, stmt, row_type: type, missing: Exception):
    """The first row of ``stmt`` as a ``row_type``; ``missing`` is raised when there is none
    (the error that names what was looked for)."""
    found = sql.tuples(conn, stmt.limit(1))
    if not found:
        raise missing
    return row_type(*found[0])


def _columns(table, row_type) -> list:
    return [table.c[f.name] for f in fields(row_type)]


# ---------------------------------------------------------------- DAGs and files


@dataclass(frozen=True)
class KnownFile:
    path: str
    content_hash: str
    dag_ids: tuple[str, ...]
    error: str | None
    error_line: int | None
    depends_on: tuple[str, ...] = ()


@dataclass(frozen=True)
class DagRow:
    """A DAG as the registry holds it; ``error`` is its file's import error while the file
    fails (the DAG then runs as last parsed)."""

    dag_id: str
    fileloc: str
    is_paused: bool
    is_active: bool
    spec: DagSpec
    cursor: datetime | None
    error: str | None = None


_KNOWN_FILES = Statement(
    "Every DAG file parsed: its hash, its DAGs, its error and the helpers it imports.",
    select(*dag_file.c["path", "content_hash", "dag_ids", "error", "error_line", "depends_on"]),
)


def known_files(conn: Connection) -> dict[str, KnownFile]:
    rows = sql.rows(conn, _KNOWN_FILES)
    return {
        r.path: KnownFile(
            r.path,
            r.content_hash,
            tuple(json.loads(r.dag_ids)),
            r.error,
            r.error_line,
            tuple(json.loads(r.depends_on or "[]")),
        )
        for r in rows
    }


def import_errors(conn: Connection) -> list[KnownFile]:
    stmt = (
        select(dag_file.c.path, dag_file.c.content_hash, dag_file.c.error, dag_file.c.error_line)
        .where(dag_file.c.error.is_not(None))
        .order_by(dag_file.c.path)
    )
    return [
        KnownFile(r.path, r.content_hash, (), r.error, r.error_line) for r in sql.rows(conn, stmt)
    ]


def good_source(conn: Connection, path: str) -> str | None:
    """The source of ``path``'s last parse that succeeded (what runs while the file fails)."""
    return sql.scalar(conn, select(dag_file.c.good_source).where(dag_file.c.path == path))


def external_state(
    conn: Connection, dag_id: str, logical_date: datetime, task_id: str | None = None
) -> str | None:
    """The state of a DAG's run at a logical date (the newest, when manual runs share the
    date), or of one task in it (a mapped task's instances as one state); None while there
    is none. What an ExternalTaskSensor waits on."""
    run_pk = sql.scalar(
        conn,
        select(dag_run.c.id)
        .where(dag_run.c.dag_id == dag_id, dag_run.c.logical_date == logical_date)
        .order_by(dag_run.c.id.desc())
        .limit(1),
    )
    if run_pk is None:
        return None
    if task_id is None:
        return sql.scalar(conn, select(dag_run.c.state).where(dag_run.c.id == run_pk))
    stmt = select(ti.c.state).where(ti.c.run_pk == run_pk, ti.c.task_id == task_id)
    states = sql.scalars(conn, stmt)
    return reduce(merged, map(TaskState, states)).value if states else None


_DAG_SELECT = select(
    *dag.c["dag_id", "fileloc", "is_paused", "is_active", "spec_hash", "spec"],
    dag.c.next_logical_date,
    dag_file.c.error,
).outerjoin(dag_file, dag_file.c.path == dag.c.fileloc)


def _dag_row(r) -> DagRow:
    spec = spec_from(r.spec_hash, r.spec)
    return DagRow(
        r.dag_id,
        r.fileloc,
        bool(r.is_paused),
        bool(r.is_active),
        spec,
        r.next_logical_date,
        r.error,
    )


def active_dags(conn: Connection) -> list[DagRow]:
    stmt = _DAG_SELECT.where(dag.c.is_active.is_(True)).order_by(dag.c.dag_id)
    return [_dag_row(r) for r in sql.rows(conn, stmt)]


_DAG = Statement("One DAG, active or not.", _DAG_SELECT.where(dag.c.dag_id == _b("dag_id")))
_ACTIVE_DAG = Statement(
    "One DAG that its file still defines.",
    _DAG_SELECT.where(dag.c.dag_id == _b("dag_id"), dag.c.is_active.is_(True)),
)


def get_dag(conn: Connection, dag_id: str, *, active: bool = True) -> DagRow:
    """One DAG; ``active=False`` also finds a DAG whose file no longer defines it (its runs
    outlive the file)."""
    row = sql.first(conn, _ACTIVE_DAG if active else _DAG, {"b_dag_id": dag_id})
    if row is None:
        raise DagNotFound(dag_id)
    return _dag_row(row)


def latest_runs(conn: Connection, dag_ids: list[str]) -> dict[str, datetime]:
    """Each DAG's latest logical date of a scheduled, backfilled or asset run (manual runs
    are not on the schedule).

    Per DAG, the last key of the one-run-per-date index (its predicate written out, so
    SQLite uses that partial index): a ``max()`` grouped by DAG read every run of the DAG,
    28 ms at 100,000 runs on each grid page and DAG list.
    """
    return dict(_per_dag(conn, _latest_run, dag_ids))


def _latest_run(dag_id: BindParameter) -> Select:
    scheduled = dag_run.c.run_type != literal_column(f"'{RunType.MANUAL.value}'")
    return (
        select(dag_run.c.dag_id, dag_run.c.logical_date)
        .where(dag_run.c.dag_id == dag_id, scheduled)
        .order_by(dag_run.c.logical_date.desc())
        .limit(1)
    )


def _per_dag(
    conn: Connection,
    part: Callable[[BindParameter], Select],
    dag_ids: list[str],
    params: dict | None = None,
) -> Iterator[tuple]:
    """The rows of ``part`` for every DAG, as a UNION ALL of one statement per 200 DAGs:
    each part reads only its own rows through an index, where a window function or a
    GROUP BY would read every run. The DAG ids are bound, so the statement for n DAGs is
    rendered once (``_union``), not at every page."""
    for start in range(0, len(dag_ids), _UNION_CHUNK):
        chunk = dag_ids[start : start + _UNION_CHUNK]
        bound = {f"b_dag_{i}": dag_id for i, dag_id in enumerate(chunk)}
        yield from sql.tuples(conn, _union(part, len(chunk)), {**bound, **(params or {})})


_UNIONS: dict[tuple[Callable, int], Statement] = {}


def _union(part: Callable[[BindParameter], Select], count: int) -> Statement:
    """``part`` for ``count`` DAGs (``b_dag_0`` ...) as one statement, named for its
    rendering to be kept (``rendered``)."""
    found = _UNIONS.get((part, count))
    if found is None:
        parts = [part(_b(f"dag_{i}")) for i in range(count)]
        union = parts[0] if count == 1 else union_all(*(p.subquery().select() for p in parts))
        found = _UNIONS[part, count] = Statement(f"{part.__name__} of {count} DAGs.", union)
        found.name = f"reads.{part.__name__.strip('_')}.{count}"
    return found


_SPEC = Statement(
    "A DAG's stored spec and its hash.",
    select(dag.c.spec_hash, dag.c.spec).where(dag.c.dag_id == _b("dag_id")),
)


def load_spec(conn: Connection, dag_id: str) -> DagSpec:
    """The stored spec of a DAG, active or not (runs outlive the file that made them)."""
    row = sql.first(conn, _SPEC, {"b_dag_id": dag_id})
    if row is None:
        raise DagNotFound(dag_id)
    return spec_from(row.spec_hash, row.spec)


_ACTIVE_DAG_IDS = Statement(
    "The DAGs their files still define.", select(dag.c.dag_id).where(dag.c.is_active.is_(True))
)


def active_dag_ids(conn: Connection) -> list[str]:
    return sql.scalars(conn, _ACTIVE_DAG_IDS)


# ---------------------------------------------------------------- runs


@dataclass(frozen=True)
class RunRow:
    id: int
    dag_id: str
    run_id: str
    logical_date: datetime
    data_interval_start: datetime
    data_interval_end: datetime
    run_type: str
    state: str
    created_at: datetime
    start_date: datetime | None
    end_date: datetime | None
    not_before: datetime | None = None
    conf_json: str | None = None

    @property
    def conf(self) -> dict:
        """The conf the run was triggered with (``{}`` for scheduled and backfill runs)."""
        return json.loads(self.conf_json) if self.conf_json else {}

    @property
    def duration(self) -> float | None:
        if self.start_date and self.end_date:
            return (self.end_date - self.start_date).total_seconds()
        return None


_RUNS = select(*[dag_run.c[f.name] for f in fields(RunRow)[:-1]], dag_run.c.conf)


def _run_rows(conn: Connection, stmt) -> list[RunRow]:
    return [RunRow(*r) for r in sql.tuples(conn, stmt)]


def runs(
    conn: Connection,
    dag_id: str,
    *,
    state: str | None = None,
    limit: int | None = None,
    before: datetime | None = None,
    newest_first: bool = False,
) -> list[RunRow]:
    stmt = _RUNS.where(dag_run.c.dag_id == dag_id)
    if state:
        stmt = stmt.where(dag_run.c.state == state)
    if before is not None:
        stmt = stmt.where(dag_run.c.logical_date < before)
    stmt = stmt.order_by(dag_run.c.logical_date.desc() if newest_first else dag_run.c.logical_date)
    return _run_rows(conn, stmt.limit(limit) if limit else stmt)


def runs_between(
    conn: Connection, dag_id: str, start: datetime, end: datetime, *, scheduled: bool = False
) -> list[RunRow]:
    """The DAG's runs with logical dates in [start, end]; ``scheduled``: not the manual ones
    (a backfill's dates are those of scheduled and backfill runs, one per date)."""
    stmt = _RUNS.where(dag_run.c.dag_id == dag_id, dag_run.c.logical_date.between(start, end))
    if scheduled:
        stmt = stmt.where(dag_run.c.run_type != RunType.MANUAL.value)
    return _run_rows(conn, stmt.order_by(dag_run.c.logical_date, dag_run.c.id))


def run_by_id(conn: Connection, dag_id: str, run_id: str) -> RunRow:
    stmt = _RUNS.where(dag_run.c.dag_id == dag_id, dag_run.c.run_id == run_id)
    return _one(conn, stmt, RunRow, RunNotFound(dag_id, f"with run id '{run_id}'"))


def run_by_date(conn: Connection, dag_id: str, logical_date: datetime) -> RunRow:
    """The run at ``logical_date``: the scheduled or backfill one (there is at most one),
    else the one manual run there; several manual runs there must be named by run id."""
    stmt = _RUNS.where(dag_run.c.dag_id == dag_id, dag_run.c.logical_date == logical_date)
    found = _run_rows(conn, stmt.order_by(dag_run.c.id))
    scheduled = [r for r in found if r.run_type != RunType.MANUAL.value]
    if scheduled or len(found) == 1:
        return (scheduled or found)[0]
    if not found:
        raise RunNotFound(dag_id, f"at {logical_date.isoformat()}")
    names = ", ".join(r.run_id for r in found)
    raise UsageError(
        f"DAG '{dag_id}' has {len(found)} manual runs at {logical_date.isoformat()} ({names}): "
        "name one by its run id"
    )


_RUN_BY_PK = Statement("One run by its key.", _RUNS.where(dag_run.c.id == _b("pk")))


def run_by_pk(conn: Connection, pk: int) -> RunRow:
    return RunRow(*sql.tuples(conn, _RUN_BY_PK, {"b_pk": pk})[0])


_RUN_IDS_IN_STATE = Statement(
    "The ids of the runs in one state, oldest logical date first.",
    select(dag_run.c.id).where(dag_run.c.state == _b("state")).order_by(dag_run.c.logical_date),
)
_UNFINISHED_RUN_IDS = Statement(
    "The ids of the runs not ended yet.",
    select(dag_run.c.id).where(dag_run.c.state.in_(_UNFINISHED)),
)


def runs_in_state(conn: Connection, run_pks: list[int], state: RunState) -> list[int]:
    """Which of these runs are in ``state``, oldest logical date first.

    Reads the runs in that state (an index search) and keeps the wanted ones here: a backfill
    asks this for hundreds of runs several times a second, and a long ``IN`` list costs more
    to build than the few rows it saves."""
    if not run_pks:
        return []
    wanted = set(run_pks)
    found = sql.scalars(conn, _RUN_IDS_IN_STATE, {"b_state": state.value})
    return [pk for pk in found if pk in wanted]


def all_finished(conn: Connection, run_pks: list[int]) -> bool:
    """Whether every one of these runs has ended (see ``runs_in_state`` on why no IN list)."""
    return not set(run_pks) & set(sql.scalars(conn, _UNFINISHED_RUN_IDS))


_RUN_STATE_COUNTS = Statement(
    "How many of these runs are in each state.",
    select(dag_run.c.state, func.count())
    .where(dag_run.c.id.in_(_many("run_pks")))
    .group_by(dag_run.c.state),
)
_TASK_STATE_COUNTS = Statement(
    "How many task instances of these runs are in each state.",
    select(ti.c.state, func.count()).where(ti.c.run_pk.in_(_many("run_pks"))).group_by(ti.c.state),
)


def run_state_counts(conn: Connection, run_pks: list[int]) -> Counter:
    return _counts(conn, _RUN_STATE_COUNTS, run_pks)


def task_state_counts(conn: Connection, run_pks: list[int]) -> Counter:
    return _counts(conn, _TASK_STATE_COUNTS, run_pks)


def _counts(conn: Connection, statement: Statement, run_pks: list[int]) -> Counter:
    """States counted over some runs, ``sql.IN_CHUNK`` runs a statement (a backfill of
    9,000 runs asks for its progress every second)."""
    found: Counter = Counter()
    for chunk in sql.chunks(run_pks):
        found.update(dict(sql.tuples(conn, statement, {"b_run_pks": chunk})))
    return found


_PENDING_TASK = Statement(
    "One task instance of a DAG that is queued, running or waiting for a retry or a poke, if any.",
    select(ti.c.id).where(ti.c.dag_id == _b("dag_id"), ti.c.state.in_(_PENDING)).limit(1),
)


def has_pending_tasks(conn: Connection, dag_id: str) -> bool:
    """Whether a task of the DAG, in any run, is queued, running or waiting for a retry or
    (a sensor) for its next poke."""
    return bool(sql.tuples(conn, _PENDING_TASK, {"b_dag_id": dag_id}))


def has_active_runs(conn: Connection, dag_id: str | None = None) -> bool:
    """Whether any run (of one DAG, or of any) is queued or running: the page then refreshes."""
    stmt = select(dag_run.c.id).where(dag_run.c.state.in_(_ACTIVE)).limit(1)
    if dag_id is not None:
        stmt = stmt.where(dag_run.c.dag_id == dag_id)
    return bool(sql.tuples(conn, stmt))


def recent_runs(conn: Connection, dag_ids: list[str], per_dag: int) -> dict[str, list[RunRow]]:
    """The newest ``per_dag`` runs of each DAG (oldest first): per DAG, ``ORDER BY
    logical_date DESC LIMIT n`` through the (dag_id, logical_date) key."""
    found: dict[str, list[RunRow]] = {d: [] for d in dag_ids}
    for row in _per_dag(conn, _recent_runs, dag_ids, {"b_per_dag": per_dag}):
        run = RunRow(*row)
        found[run.dag_id].append(run)
    for found_runs in found.values():
        found_runs.sort(key=lambda r: r.logical_date)
    return found


def _recent_runs(dag_id: BindParameter) -> Select:
    newest = _RUNS.where(dag_run.c.dag_id == dag_id).order_by(dag_run.c.logical_date.desc())
    return newest.limit(_b("per_dag"))


def run_page(
    conn: Connection, dag_id: str, before: datetime | None, limit: int, state: str | None = None
) -> tuple[list[RunRow], datetime | None]:
    """The ``limit`` newest runs before ``before`` (oldest first) and the older page's cursor.

    One statement through the (dag_id, logical_date) key; its extra row tells whether older
    runs exist, so paging deep into a long history costs what the first page costs.
    """
    rows = runs(conn, dag_id, state=state, limit=limit + 1, before=before, newest_first=True)
    page = list(reversed(rows[:limit]))
    return page, page[0].logical_date if len(rows) > limit else None


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


def task_instance(
    conn: Connection, run: RunRow, task_id: str, map_index: int | None = None
) -> TaskRow:
    """The task's instance in the run; a mapped task's index ``map_index`` (which may be
    left out only when the task has a single instance)."""
    stmt = _TASKS.where(ti.c.run_pk == run.id, ti.c.task_id == task_id).order_by(ti.c.map_index)
    rows = [TaskRow(*r) for r in sql.tuples(conn, stmt)]
    if map_index is not None:
        rows = [r for r in rows if r.map_index == map_index]
        if not rows:
            raise UsageError(f"task '{task_id}' has no map index {map_index} in this run")
    if not rows:
        raise TaskNotFound(run.dag_id, task_id)
    if len(rows) > 1:
        raise MappedTaskError(task_id, [r.map_index for r in rows])
    return rows[0]


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
    stmt = (
        select(dag_run.c.logical_date)
        .where(dag_run.c.dag_id == dag_id, dag_run.c.logical_date > after)
        .order_by(dag_run.c.logical_date)
        .limit(limit + 1)
    )
    newer = sql.scalars(conn, stmt)
    if not newer:
        return False, None
    return True, newer[limit] if len(newer) > limit else None


def grid_cells(conn: Connection, run_pks: list[int]) -> list[Cell]:
    """The cells of many runs in one query, through the (run_pk, task_id) key."""
    if not run_pks:
        return []
    stmt = select(*_columns(ti, Cell)).where(ti.c.run_pk.in_(run_pks))
    return [Cell(*r) for r in sql.tuples(conn, stmt)]


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


class AttemptNotFound(DagrunError, LookupError):
    """No attempt with this try number exists for the task instance."""

    def __init__(self, dag_id: str, task_id: str, try_number: int):
        super().__init__(f"{dag_id}.{task_id} has no try {try_number}")
        self.dag_id = dag_id
        self.task_id = task_id
        self.try_number = try_number


def attempts(conn: Connection, ti_id: int) -> list[AttemptRow]:
    stmt = _ATTEMPTS.where(task_attempt.c.ti_id == ti_id).order_by(task_attempt.c.id)
    return [AttemptRow(*r) for r in sql.tuples(conn, stmt)]


def run_attempts(conn: Connection, run_pk: int) -> dict[int, list[AttemptRow]]:
    """Every attempt of one run, by task instance, in the order they started."""
    found: dict[int, list[AttemptRow]] = {}
    stmt = _ATTEMPTS.where(task_attempt.c.run_pk == run_pk).order_by(task_attempt.c.id)
    for row in sql.tuples(conn, stmt):
        attempt = AttemptRow(*row)
        found.setdefault(attempt.ti_id, []).append(attempt)
    return found


def attempt(
    conn: Connection, dag_id: str, run_pk: int, task_id: str, try_number: int, ti_id: int
) -> AttemptRow:
    """One attempt of the task instance ``ti_id``, named by its try number (the latest
    record if a try was released)."""
    stmt = _ATTEMPTS.where(
        task_attempt.c.run_pk == run_pk,
        task_attempt.c.task_id == task_id,
        task_attempt.c.ti_id == ti_id,
        task_attempt.c.try_number == try_number,
    ).order_by(task_attempt.c.id.desc())
    return _one(conn, stmt, AttemptRow, AttemptNotFound(dag_id, task_id, try_number))


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
    stmt = (
        select(ti.c.dag_id, ti.c.task_id, *dag_run.c["run_id", "logical_date"])
        .add_columns(ti.c.try_number, ti.c.last_error, ti.c.map_index)
        .join(dag_run, dag_run.c.id == ti.c.run_pk)
        .where(in_state(TaskState.FAILED))
        .order_by(ti.c.dag_id, dag_run.c.logical_date, ti.c.task_id, ti.c.map_index)
    )
    if dag_id:
        stmt = stmt.where(ti.c.dag_id == dag_id)
    return [DeadLetter(*r) for r in sql.tuples(conn, stmt)]


# ---------------------------------------------------------------- pools


@dataclass(frozen=True)
class PoolRow:
    """A pool with its task counts; ``exists`` is False for a pool tasks name but nobody
    created (its tasks wait until it exists)."""

    name: str
    slots: int | None
    description: str | None
    running: int
    queued: int
    exists: bool = True


def pool_rows(conn: Connection) -> list[PoolRow]:
    """Every pool, and every pool name that task instances use without it existing."""
    counts: Counter = Counter()
    stmt = (
        select(ti.c.pool, ti.c.state, func.count())
        .where(ti.c.pool.is_not(None))
        .group_by(ti.c.pool, ti.c.state)
    )
    for name, state, n in sql.tuples(conn, stmt):
        counts[(name, state)] = n
    created = {r.name: r for r in sql.rows(conn, select(pool).order_by(pool.c.name))}
    named = {name for name, state in counts if state == TaskState.QUEUED.value}
    return [
        PoolRow(
            name,
            created[name].slots if name in created else None,
            created[name].description if name in created else None,
            counts[(name, TaskState.RUNNING.value)],
            counts[(name, TaskState.QUEUED.value)],
            exists=name in created,
        )
        for name in sorted(created.keys() | named)
    ]


STATEMENTS = name_all(globals(), prefix="reads.")

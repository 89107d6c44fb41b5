"""The view models the HTML pages and the ``/api`` routes share, so the API mirrors the pages.

Each ``read_*`` function reads inside one short read transaction (a WAL snapshot on SQLite) and
builds its model after the transaction ends, so no lock is held while HTML is built or sent.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection

from dagrun.spec import DagSpec
from dagrun.states import TaskState
from dagrun.store import Store, audit, reads
from dagrun.store.reads import AttemptRow, DagRow, GridPage, RunRow, TaskRow
from dagrun.timetable import DataInterval
from dagrun.webapp.formatting import fmt_duration, live_duration, local, utc
from dagrun.webapp.paging import Paging
from dagrun.webapp.urls import run_url

RECENT_RUNS_PER_DAG = 14


@dataclass(frozen=True)
class DagInfo:
    """A DAG as the page shows it: the registry's row and the next run it will get."""

    row: DagRow
    next_interval: DataInterval | None

    @classmethod
    def of(cls, row: DagRow, now: datetime, latest_run: datetime | None) -> DagInfo:
        return cls(row, row.spec.next_interval(row.cursor, now, latest_run))

    @property
    def next_logical_date(self) -> datetime | None:
        return self.next_interval.start if self.next_interval else None

    @property
    def next_due(self) -> datetime | None:
        """When the next run falls due: the end of its data interval."""
        return self.next_interval.end if self.next_interval else None

    @property
    def dag_id(self) -> str:
        return self.row.dag_id

    @property
    def spec(self) -> DagSpec:
        return self.row.spec

    @property
    def fileloc(self) -> str:
        return self.row.fileloc

    @property
    def is_paused(self) -> bool:
        return self.row.is_paused

    @property
    def is_active(self) -> bool:
        return self.row.is_active

    @property
    def error(self) -> str | None:
        return self.row.error


@dataclass(frozen=True)
class GridColumn:
    """One run as a grid column, with what each of its cells repeats worked out once."""

    run: RunRow
    href: str
    local: str
    utc: str


@dataclass(frozen=True)
class GridCell:
    task_id: str
    column: GridColumn
    state: str
    try_number: int
    max_tries: int
    duration: float | None

    @property
    def run_id(self) -> str:
        return self.column.run.run_id

    @property
    def title(self) -> str:
        """What hovering shows: state, try and duration, and the date in both zones."""
        return (
            f"{self.task_id} · {self.state}\ntry {self.try_number} of {self.max_tries} · "
            f"{fmt_duration(self.duration)}\n{self.column.local} ({self.column.utc})"
        )

    @property
    def href(self) -> str:
        return f"{self.column.href}#task-{self.task_id}"


@dataclass(frozen=True)
class GridRow:
    task_id: str
    removed: bool
    cells: list[GridCell]


@dataclass(frozen=True)
class TaskLine:
    """One task of a run: its instance (None before the run was admitted) and attempts."""

    task_id: str
    removed: bool
    instance: TaskRow | None
    attempts: list[AttemptRow]
    duration: float | None

    @property
    def state(self) -> str:
        return self.instance.state if self.instance else TaskState.NONE.value

    @property
    def map_index(self) -> int:
        """The index of a mapped task's instance; -1 for a task that is not mapped."""
        return self.instance.map_index if self.instance else -1


@dataclass(frozen=True)
class GridView:
    """Everything the grid page and ``/api/dags/<id>/grid`` show, read in one transaction."""

    dag: DagInfo
    page: GridPage
    columns: list[GridColumn]
    rows: list[GridRow]
    paging: Paging
    active: bool


@dataclass(frozen=True)
class RunView:
    dag: DagInfo
    run: RunRow
    lines: list[TaskLine]


# ---------------------------------------------------------------- reading a view


def read_dag_list(
    store: Store, conn: Connection
) -> tuple[list[DagInfo], dict[str, list[RunRow]], int]:
    """The DAGs, their recent runs and the import error count, inside the caller's read."""
    now = store.now(conn)
    rows = reads.active_dags(conn)
    latest = reads.latest_runs(conn, [r.dag_id for r in rows])
    infos = [DagInfo.of(row, now, latest.get(row.dag_id)) for row in rows]
    recent = reads.recent_runs(conn, [i.dag_id for i in infos], RECENT_RUNS_PER_DAG)
    return infos, recent, len(reads.import_errors(conn))


def read_dag(store: Store, conn: Connection, dag_id: str) -> DagInfo:
    """One DAG, active or not: runs outlive the file that made them, so their grid does too."""
    latest = reads.latest_runs(conn, [dag_id]).get(dag_id)
    return DagInfo.of(reads.get_dag(conn, dag_id, active=False), store.now(conn), latest)


def read_grid(store: Store, dag_id: str, paging: Paging) -> GridView:
    with store.read() as conn:
        now = store.now(conn)
        info = read_dag(store, conn, dag_id)
        page = reads.grid_page(conn, dag_id, paging.before, paging.runs)
        active = reads.has_active_runs(conn, dag_id)
    columns = grid_columns(info, page)
    rows = grid_rows(columns, page, _task_order(info, page.task_ids), now)
    return GridView(info, page, columns, rows, paging, active)


def read_run(store: Store, dag_id: str, run_id: str) -> RunView:
    with store.read() as conn:
        now = store.now(conn)
        info = read_dag(store, conn, dag_id)
        run = reads.run_by_id(conn, dag_id, run_id)
        instances = reads.task_instances(conn, [run.id])
        attempts = reads.run_attempts(conn, run.id)
    return RunView(info, run, task_lines(info, instances, attempts, now))


# ---------------------------------------------------------------- building a view


def _task_order(info: DagInfo, found: Iterable[str]) -> list[tuple[str, bool]]:
    """Tasks in topological order, then tasks of past runs no longer in the DAG (removed)."""
    known = [t.task_id for t in info.spec.tasks]
    extra = sorted(set(found) - set(known))
    return [(t, False) for t in known] + [(t, True) for t in extra]


def grid_columns(info: DagInfo, page: GridPage) -> list[GridColumn]:
    tz = info.spec.timetable.tz
    return [
        GridColumn(
            run,
            run_url(info.dag_id, run.run_id),
            local(run.logical_date, tz),
            utc(run.logical_date),
        )
        for run in page.runs
    ]


def grid_rows(
    columns: list[GridColumn], page: GridPage, tasks: list[tuple[str, bool]], now: datetime
) -> list[GridRow]:
    """Rows of cells (task by run) built once, for the HTML grid and the JSON grid alike."""
    return [
        GridRow(task_id, removed, [_grid_cell(task_id, c, page, now) for c in columns])
        for task_id, removed in tasks
    ]


def _grid_cell(task_id: str, column: GridColumn, page: GridPage, now: datetime) -> GridCell:
    cell = page.cell(column.run.id, task_id)
    if cell is None:  # the run has not been admitted yet, or the task is newer than the run
        return GridCell(task_id, column, TaskState.NONE.value, 0, 0, None)
    duration = live_duration(cell.state, cell.duration, cell.start_date, now)
    return GridCell(task_id, column, cell.state, cell.try_number, cell.max_tries, duration)


def task_lines(
    info: DagInfo, instances: list[TaskRow], attempts: dict[int, list[AttemptRow]], now: datetime
) -> list[TaskLine]:
    """A line per task instance (each index of a mapped task), in task order; a task the
    run has no instance of yet gets an empty line."""
    by_task: dict[str, list[TaskRow]] = {}
    for instance in instances:
        by_task.setdefault(instance.task_id, []).append(instance)
    lines = []
    for task_id, removed in _task_order(info, by_task):
        for instance in by_task.get(task_id) or [None]:
            duration = None
            if instance is not None:
                duration = live_duration(
                    instance.state, instance.duration, instance.start_date, now
                )
            tries = attempts.get(instance.id, []) if instance else []
            lines.append(TaskLine(task_id, removed, instance, tries, duration))
    return lines


#: Audit entries a page or an API answer shows at most (``?limit=``).
AUDIT_LIMIT = 1000


def read_audit(store: Store, dag_id: str | None, limit: str | None) -> list[audit.Entry]:
    """The newest audit entries (``limit`` as the query gave it, default 100), of one DAG
    when ``dag_id`` is given (a DAG that is not known is a 404, as on every page of a DAG)."""
    try:
        limit = min(AUDIT_LIMIT, max(1, int(limit or 100)))
    except ValueError:
        limit = 100
    with store.read() as conn:
        if dag_id is not None:
            reads.get_dag(conn, dag_id)
        return audit.entries(conn, dag_id, limit)

"""The view models the HTML pages and the ``/api`` routes share, so the API mirrors the pages.

Each ``read_*`` function reads inside one short read transaction (a WAL snapshot on SQLite) and
builds its model after the transaction ends, so no lock is held while HTML is built or sent.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from dagrun.parsing.spec import DagSpec
from dagrun.states import TaskState
from dagrun.store import Store, audit, dag_reads, run_reads, task_reads
from dagrun.store.dag_reads import DagRow
from dagrun.store.run_reads import RunRow
from dagrun.store.task_reads import AttemptRow, GridPage, TaskRow
from dagrun.timing.timetable import DataInterval
from dagrun.webapp.formatting import live_duration
from dagrun.webapp.graph_view import GraphPicture, picture
from dagrun.webapp.grid import GridColumn, GridRow, GridShape, grid_columns, grid_rows, grid_tasks
from dagrun.webapp.paging import Paging

if TYPE_CHECKING:
    from sqlalchemy import Connection

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
    shape: GridShape


@dataclass(frozen=True)
class RunView:
    """What a run's page shows: the DAG, the run and a line per task."""

    dag: DagInfo
    run: RunRow
    lines: list[TaskLine]


#: Runs the graph page offers to colour the graph by, newest first.
GRAPH_RECENT_RUNS = 8


@dataclass(frozen=True)
class GraphView:
    """The graph page: the DAG, the run colouring it (or None), the newest runs to pick
    from, and the picture."""

    dag: DagInfo
    run: RunRow | None
    recent: list[RunRow]
    picture: GraphPicture


# ---------------------------------------------------------------- reading a view


def read_dag_list(
    store: Store, conn: Connection
) -> tuple[list[DagInfo], dict[str, list[RunRow]], int]:
    """The DAGs, their recent runs and the import error count, inside the caller's read."""
    now = store.now(conn)
    rows = dag_reads.active_dags(conn)
    latest = run_reads.latest_runs(conn, [r.dag_id for r in rows])
    infos = [DagInfo.of(row, now, latest.get(row.dag_id)) for row in rows]
    recent = run_reads.recent_runs(conn, [i.dag_id for i in infos], RECENT_RUNS_PER_DAG)
    return infos, recent, len(dag_reads.import_errors(conn))


def read_dag(store: Store, conn: Connection, dag_id: str) -> DagInfo:
    """One DAG, active or not: runs outlive the file that made them, so their grid does too."""
    latest = run_reads.latest_runs(conn, [dag_id]).get(dag_id)
    return DagInfo.of(dag_reads.get_dag(conn, dag_id, active=False), store.now(conn), latest)


def read_grid(store: Store, dag_id: str, paging: Paging, shape: GridShape) -> GridView:
    with store.read() as conn:
        now = store.now(conn)
        info = read_dag(store, conn, dag_id)
        page = task_reads.grid_page(conn, dag_id, paging.before, paging.runs, shape.expand)
        active = run_reads.has_active_runs(conn, dag_id)
    columns = grid_columns(dag_id, info.spec.timetable.tz, page.runs)
    groups = {t.task_id: t.group for t in info.spec.tasks}
    mapped = info.spec.mapped_ids | page.mapped_ids
    tasks = grid_tasks(task_order(info, page.task_ids), groups, mapped)
    rows = grid_rows(columns, page, tasks, shape, now)
    return GridView(info, page, columns, rows, paging, active, shape)


def read_run(store: Store, dag_id: str, run_id: str) -> RunView:
    with store.read() as conn:
        now = store.now(conn)
        info = read_dag(store, conn, dag_id)
        run = run_reads.run_by_id(conn, dag_id, run_id)
        instances = task_reads.task_instances(conn, [run.id])
        attempts = task_reads.run_attempts(conn, run.id)
    return RunView(info, run, task_lines(info, instances, attempts, now))


def read_graph(store: Store, dag_id: str, run_id: str | None) -> GraphView:
    """The DAG's graph, coloured by run ``run_id`` when given (an unknown run is a 404), and
    its newest runs to pick from."""
    with store.read() as conn:
        info = read_dag(store, conn, dag_id)
        run = run_reads.run_by_id(conn, dag_id, run_id) if run_id is not None else None
        instances = task_reads.task_instances(conn, [run.id]) if run is not None else []
        recent = run_reads.runs(conn, dag_id, limit=GRAPH_RECENT_RUNS, newest_first=True)
    return GraphView(info, run, recent, picture(info.spec, run, instances))


# ---------------------------------------------------------------- building a view


def task_order(info: DagInfo, found: Iterable[str]) -> list[tuple[str, bool]]:
    """Tasks in topological order, then tasks of past runs no longer in the DAG (removed)."""
    known = [t.task_id for t in info.spec.tasks]
    extra = sorted(set(found) - set(known))
    return [(t, False) for t in known] + [(t, True) for t in extra]


def task_lines(
    info: DagInfo, instances: list[TaskRow], attempts: dict[int, list[AttemptRow]], now: datetime
) -> list[TaskLine]:
    """A line per task instance (each index of a mapped task), in task order; a task the
    run has no instance of yet gets an empty line."""
    by_task: dict[str, list[TaskRow]] = {}
    for row in instances:
        by_task.setdefault(row.task_id, []).append(row)
    lines = []
    for task_id, removed in task_order(info, by_task):
        found: Sequence[TaskRow | None] = by_task.get(task_id) or [None]
        for instance in found:
            duration = None
            if instance is not None:
                duration = live_duration(
                    instance.state, instance.duration, instance.start_date, now
                )
            tries = attempts.get(instance.id, []) if instance else []
            lines.append(TaskLine(task_id, removed, instance, tries, duration))
    return lines


#: Audit entries a page or an API answer shows at most (``?limit=``), and without a limit.
AUDIT_LIMIT = 1000
AUDIT_DEFAULT = 100


def read_audit(store: Store, dag_id: str | None, limit: str | None) -> list[audit.Entry]:
    """The newest audit entries (``limit`` as the query gave it), of one DAG when ``dag_id``
    is given (a DAG that is not known is a 404, as on every page of a DAG)."""
    try:
        most = min(AUDIT_LIMIT, max(1, int(limit or AUDIT_DEFAULT)))
    except ValueError:
        most = AUDIT_DEFAULT
    with store.read() as conn:
        if dag_id is not None:
            dag_reads.get_dag(conn, dag_id)
        return audit.entries(conn, dag_id, most)

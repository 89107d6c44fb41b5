"""Read-only, batched queries behind the web page, beyond what ``queries.py`` offers.

The web reads the same store the scheduler and workers write, so every view here is a few
statements run inside one short read transaction (``Store.read()``), each served by an
index: a grid page is one query for its runs and one for their task instances, however many
runs the DAG has. Nothing here writes, locks a row, or runs one query per cell.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Connection, func, select, union_all

from dagrun.errors import DagNotFound, DagrunError
from dagrun.spec import DagSpec
from dagrun.states import ACTIVE_RUN_STATES, AttemptOutcome, RunState, TaskState
from dagrun.store.queries import ATTEMPT_COLUMNS, RunRow
from dagrun.store.queries import AttemptRow as Attempt
from dagrun.store.registry import spec_from
from dagrun.store.schema import dag, dag_file, dag_run, in_state, task_attempt, task_instance

ti = task_instance
_RUN_COLUMNS = [dag_run.c[name] for name in RunRow.__dataclass_fields__]
_ACTIVE = [s.value for s in ACTIVE_RUN_STATES]
#: SQLite refuses compound SELECTs of more than 500 terms; stay well below.
_UNION_CHUNK = 200


class AttemptNotFound(DagrunError, LookupError):
    """No attempt with this try number exists for the task instance."""

    def __init__(self, dag_id: str, task_id: str, try_number: int):
        super().__init__(f"{dag_id}.{task_id} has no try {try_number}")
        self.dag_id = dag_id
        self.task_id = task_id
        self.try_number = try_number


# ---------------------------------------------------------------- DAGs


@dataclass(frozen=True)
class DagInfo:
    """A DAG as the page shows it: its spec, the registry's flags, and its next run."""

    dag_id: str
    fileloc: str
    spec: DagSpec
    is_paused: bool
    is_active: bool
    next_logical_date: datetime | None


_DAG_COLUMNS = (
    dag.c.dag_id,
    dag.c.fileloc,
    dag.c.spec_hash,
    dag.c.spec,
    dag.c.is_paused,
    dag.c.is_active,
    dag.c.next_logical_date,
)


def _dag_info(row, now: datetime) -> DagInfo:
    spec = spec_from(row.spec_hash, row.spec)
    return DagInfo(
        dag_id=row.dag_id,
        fileloc=row.fileloc,
        spec=spec,
        is_paused=bool(row.is_paused),
        is_active=bool(row.is_active),
        next_logical_date=spec.next_logical_date(row.next_logical_date, now),
    )


def dag_infos(conn: Connection, now: datetime) -> list[DagInfo]:
    """The active DAGs, by id."""
    rows = conn.execute(
        select(*_DAG_COLUMNS).where(dag.c.is_active.is_(True)).order_by(dag.c.dag_id)
    )
    return [_dag_info(r, now) for r in rows]


def dag_info(conn: Connection, dag_id: str, now: datetime) -> DagInfo:
    """One DAG, active or not: runs outlive the file that made them, so their grid does too."""
    row = conn.execute(select(*_DAG_COLUMNS).where(dag.c.dag_id == dag_id)).first()
    if row is None:
        raise DagNotFound(dag_id)
    return _dag_info(row, now)


def import_error_count(conn: Connection) -> int:
    return conn.execute(
        select(func.count()).select_from(dag_file).where(dag_file.c.error.is_not(None))
    ).scalar_one()


def recent_runs(conn: Connection, dag_ids: Iterable[str], per_dag: int) -> dict[str, list[RunRow]]:
    """The newest ``per_dag`` runs of each DAG (oldest first), in one statement per 200 DAGs.

    A UNION ALL of per-DAG ``ORDER BY logical_date DESC LIMIT n`` reads only those rows
    through the (dag_id, logical_date) key; a window function would read every run.
    """
    dag_ids = list(dag_ids)
    found: dict[str, list[RunRow]] = {d: [] for d in dag_ids}
    for start in range(0, len(dag_ids), _UNION_CHUNK):
        parts = [
            select(*_RUN_COLUMNS)
            .where(dag_run.c.dag_id == dag_id)
            .order_by(dag_run.c.logical_date.desc())
            .limit(per_dag)
            .subquery()
            .select()
            for dag_id in dag_ids[start : start + _UNION_CHUNK]
        ]
        if parts:
            for row in conn.execute(union_all(*parts)):
                found[row.dag_id].append(RunRow(*row))
    for runs in found.values():
        runs.sort(key=lambda r: r.logical_date)
    return found


def has_active_runs(conn: Connection, dag_id: str | None = None) -> bool:
    """Whether any run (of one DAG, or of any) is queued or running: the page then refreshes."""
    stmt = select(dag_run.c.id).where(dag_run.c.state.in_(_ACTIVE)).limit(1)
    if dag_id is not None:
        stmt = stmt.where(dag_run.c.dag_id == dag_id)
    return conn.execute(stmt).first() is not None


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


_CELL_COLUMNS = [ti.c[name] for name in Cell.__dataclass_fields__]


@dataclass(frozen=True)
class GridPage:
    """A page of runs (oldest first) with their cells and the cursors to the next pages.

    ``older_before`` is the ``before`` of the page of older runs (None: there are none);
    ``has_newer`` says whether newer runs exist, ``newer_before`` is the ``before`` of their
    page (None: the newer page is the latest one).
    """

    runs: list[RunRow]
    cells: dict[tuple[int, str], Cell]
    older_before: datetime | None
    has_newer: bool
    newer_before: datetime | None

    def cell(self, run_pk: int, task_id: str) -> Cell | None:
        return self.cells.get((run_pk, task_id))

    @property
    def task_ids(self) -> set[str]:
        return {task_id for _, task_id in self.cells}


def run_page(
    conn: Connection, dag_id: str, before: datetime | None, limit: int, state: str | None = None
) -> tuple[list[RunRow], datetime | None]:
    """The ``limit`` newest runs before ``before`` (oldest first) and the older page's cursor.

    One statement through the (dag_id, logical_date) key; its extra row tells whether older
    runs exist, so paging deep into a long history costs what the first page costs.
    """
    stmt = select(*_RUN_COLUMNS).where(dag_run.c.dag_id == dag_id)
    if before is not None:
        stmt = stmt.where(dag_run.c.logical_date < before)
    if state is not None:
        stmt = stmt.where(dag_run.c.state == state)
    rows = conn.execute(stmt.order_by(dag_run.c.logical_date.desc()).limit(limit + 1)).all()
    runs = [RunRow(*r) for r in reversed(rows[:limit])]
    return runs, runs[0].logical_date if len(rows) > limit else None


def grid_page(conn: Connection, dag_id: str, before: datetime | None, limit: int) -> GridPage:
    """The ``limit`` newest runs with logical date before ``before`` and their cells.

    Three indexed statements whatever the DAG's history: the page of runs, the start of the
    newer page, and the page's cells.
    """
    runs, older = run_page(conn, dag_id, before, limit)
    has_newer, newer_before = _newer_page(conn, dag_id, runs, before, limit)
    cells = {(c.run_pk, c.task_id): c for c in grid_cells(conn, [r.id for r in runs])}
    return GridPage(runs, cells, older, has_newer, newer_before)


def _newer_page(
    conn: Connection, dag_id: str, runs: list[RunRow], before: datetime | None, limit: int
) -> tuple[bool, datetime | None]:
    """Whether runs newer than this page exist, and the ``before`` that shows the next
    ``limit`` of them (None when they reach the newest run: the latest page needs none)."""
    if before is None:
        return False, None
    after = runs[-1].logical_date if runs else before - timedelta(microseconds=1)
    newer = (
        conn.execute(
            select(dag_run.c.logical_date)
            .where(dag_run.c.dag_id == dag_id, dag_run.c.logical_date > after)
            .order_by(dag_run.c.logical_date)
            .limit(limit + 1)
        )
        .scalars()
        .all()
    )
    if not newer:
        return False, None
    return True, newer[limit] if len(newer) > limit else None


def grid_cells(conn: Connection, run_pks: list[int]) -> list[Cell]:
    """The cells of many runs in one query, through the (run_pk, task_id) key."""
    if not run_pks:
        return []
    rows = conn.execute(select(*_CELL_COLUMNS).where(ti.c.run_pk.in_(run_pks))).all()
    return [Cell(*r) for r in rows]


# ---------------------------------------------------------------- attempts and logs


def run_attempts(conn: Connection, run_pk: int) -> dict[str, list[Attempt]]:
    """Every attempt of one run, by task, in the order they started."""
    found: dict[str, list[Attempt]] = {}
    rows = conn.execute(
        select(*ATTEMPT_COLUMNS).where(task_attempt.c.run_pk == run_pk).order_by(task_attempt.c.id)
    )
    for row in rows:
        found.setdefault(row.task_id, []).append(Attempt(*row))
    return found


def attempt(conn: Connection, dag_id: str, run_pk: int, task_id: str, try_number: int) -> Attempt:
    """One attempt, named by its try number (the latest record if a try was released)."""
    row = conn.execute(
        select(*ATTEMPT_COLUMNS)
        .where(
            task_attempt.c.run_pk == run_pk,
            task_attempt.c.task_id == task_id,
            task_attempt.c.try_number == try_number,
        )
        .order_by(task_attempt.c.id.desc())
        .limit(1)
    ).first()
    if row is None:
        raise AttemptNotFound(dag_id, task_id, try_number)
    return Attempt(*row)


# ---------------------------------------------------------------- health and metrics


@dataclass(frozen=True)
class Metrics:
    """The numbers an operator alerts on, all from one snapshot."""

    runs: dict[str, int]
    task_instances: dict[str, int]
    queued: int
    oldest_queued_age: float
    expired_leases: int
    stale_completions: int


def metrics(conn: Connection, now: datetime) -> Metrics:
    """Counts by state (runs through their state index); every known state is present, zero
    or not."""
    runs = dict.fromkeys((s.value for s in RunState), 0)
    runs.update(_counts(conn, dag_run.c.state))
    tis = dict.fromkeys((s.value for s in TaskState), 0)
    tis.update(_counts(conn, ti.c.state))
    oldest = conn.execute(
        select(func.min(ti.c.queued_at)).where(in_state(TaskState.QUEUED))
    ).scalar()
    expired = conn.execute(
        select(func.count())
        .select_from(ti)
        .where(in_state(TaskState.RUNNING), ti.c.lease_until < now)
    ).scalar_one()
    stale = conn.execute(
        select(func.count())
        .select_from(task_attempt)
        .where(task_attempt.c.outcome == AttemptOutcome.STALE.value)
    ).scalar_one()
    return Metrics(
        runs=runs,
        task_instances=tis,
        queued=tis[TaskState.QUEUED.value],
        oldest_queued_age=_age(oldest, now),
        expired_leases=expired,
        stale_completions=stale,
    )


def _counts(conn: Connection, column) -> dict[str, int]:
    return {value: n for value, n in conn.execute(select(column, func.count()).group_by(column))}


def _age(since: datetime | None, now: datetime) -> float:
    if since is None:
        return 0.0
    return max(0.0, (now - since).total_seconds())

"""Read-only queries for the command line and the web page.

Nothing here changes state. Each query is batched (one statement per view, never one per
row or cell) so a DAG with ten thousand runs reads as fast as a new one.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, bindparam, func, select

from dagrun.errors import RunNotFound, TaskNotFound
from dagrun.states import RunState, TaskState
from dagrun.store.schema import dag_run, in_state, task_attempt, task_instance

ti = task_instance


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

    @property
    def duration(self) -> float | None:
        if self.start_date and self.end_date:
            return (self.end_date - self.start_date).total_seconds()
        return None


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


_RUN_COLUMNS = [getattr(dag_run.c, f) for f in RunRow.__dataclass_fields__]
_TASK_COLUMNS = [getattr(ti.c, f) for f in TaskRow.__dataclass_fields__]


def runs(
    conn: Connection,
    dag_id: str,
    *,
    state: str | None = None,
    limit: int | None = None,
    before: datetime | None = None,
    newest_first: bool = False,
) -> list[RunRow]:
    stmt = select(*_RUN_COLUMNS).where(dag_run.c.dag_id == dag_id)
    if state:
        stmt = stmt.where(dag_run.c.state == state)
    if before is not None:
        stmt = stmt.where(dag_run.c.logical_date < before)
    order = dag_run.c.logical_date.desc() if newest_first else dag_run.c.logical_date
    stmt = stmt.order_by(order)
    if limit:
        stmt = stmt.limit(limit)
    return [RunRow(*r) for r in conn.execute(stmt)]


def runs_between(conn: Connection, dag_id: str, start: datetime, end: datetime) -> list[RunRow]:
    stmt = (
        select(*_RUN_COLUMNS)
        .where(dag_run.c.dag_id == dag_id, dag_run.c.logical_date.between(start, end))
        .order_by(dag_run.c.logical_date)
    )
    return [RunRow(*r) for r in conn.execute(stmt)]


def run_by_id(conn: Connection, dag_id: str, run_id: str) -> RunRow:
    row = conn.execute(
        select(*_RUN_COLUMNS).where(dag_run.c.dag_id == dag_id, dag_run.c.run_id == run_id)
    ).first()
    if row is None:
        raise RunNotFound(dag_id, f"with run id '{run_id}'")
    return RunRow(*row)


def run_by_date(conn: Connection, dag_id: str, logical_date: datetime) -> RunRow:
    row = conn.execute(
        select(*_RUN_COLUMNS).where(
            dag_run.c.dag_id == dag_id, dag_run.c.logical_date == logical_date
        )
    ).first()
    if row is None:
        raise RunNotFound(dag_id, f"at {logical_date.isoformat()}")
    return RunRow(*row)


def run_by_pk(conn: Connection, pk: int) -> RunRow:
    return RunRow(*conn.execute(select(*_RUN_COLUMNS).where(dag_run.c.id == pk)).one())


def task_instances(conn: Connection, run_pks: list[int]) -> list[TaskRow]:
    """The task instances of many runs in one query."""
    if not run_pks:
        return []
    stmt = select(*_TASK_COLUMNS).where(ti.c.run_pk.in_(run_pks)).order_by(ti.c.run_pk, ti.c.id)
    return [TaskRow(*r) for r in conn.execute(stmt)]


def task_instance(conn: Connection, run: RunRow, task_id: str) -> TaskRow:
    row = conn.execute(
        select(*_TASK_COLUMNS).where(ti.c.run_pk == run.id, ti.c.task_id == task_id)
    ).first()
    if row is None:
        raise TaskNotFound(run.dag_id, task_id)
    return TaskRow(*row)


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


ATTEMPT_COLUMNS = [task_attempt.c[name] for name in AttemptRow.__dataclass_fields__]


def attempts(conn: Connection, ti_id: int) -> list[AttemptRow]:
    stmt = select(*ATTEMPT_COLUMNS).where(task_attempt.c.ti_id == ti_id).order_by(task_attempt.c.id)
    return [AttemptRow(*r) for r in conn.execute(stmt)]


@dataclass(frozen=True)
class DeadLetter:
    dag_id: str
    task_id: str
    run_id: str
    logical_date: datetime
    try_number: int
    error: str | None


def dead_letters(conn: Connection, dag_id: str | None = None) -> list[DeadLetter]:
    """Task instances that failed for good, with their last error (newest date last)."""
    stmt = (
        select(
            ti.c.dag_id,
            ti.c.task_id,
            dag_run.c.run_id,
            dag_run.c.logical_date,
            ti.c.try_number,
            ti.c.last_error,
        )
        .join(dag_run, dag_run.c.id == ti.c.run_pk)
        .where(in_state(TaskState.FAILED))
        .order_by(ti.c.dag_id, dag_run.c.logical_date, ti.c.id)
    )
    if dag_id:
        stmt = stmt.where(ti.c.dag_id == dag_id)
    return [DeadLetter(*r) for r in conn.execute(stmt)]


def run_state_counts(conn: Connection, run_pks: list[int]) -> Counter:
    if not run_pks:
        return Counter()
    rows = conn.execute(
        select(dag_run.c.state, func.count())
        .where(dag_run.c.id.in_(run_pks))
        .group_by(dag_run.c.state)
    )
    return Counter({state: n for state, n in rows})


def task_state_counts(conn: Connection, run_pks: list[int]) -> Counter:
    if not run_pks:
        return Counter()
    rows = conn.execute(
        select(ti.c.state, func.count()).where(ti.c.run_pk.in_(run_pks)).group_by(ti.c.state)
    )
    return Counter({state: n for state, n in rows})


def runs_in_state(conn: Connection, run_pks: list[int], state: RunState) -> list[int]:
    """Which of these runs are in ``state``, oldest logical date first.

    Reads the runs in that state (an index search) and keeps the wanted ones here: a backfill
    asks this for hundreds of runs several times a second, and a long ``IN`` list costs more
    to build than the few rows it saves."""
    if not run_pks:
        return []
    wanted = set(run_pks)
    stmt = (
        select(dag_run.c.id)
        .where(dag_run.c.state == bindparam("b_state"))
        .order_by(dag_run.c.logical_date)
    )
    return [pk for pk in conn.execute(stmt, {"b_state": state.value}).scalars() if pk in wanted]


def previous_task_states(
    conn: Connection, dag_id: str, logical_date: datetime, task_ids: list[str]
) -> dict[str, str]:
    """The states of ``task_ids`` in the DAG's run just before ``logical_date`` (what
    depends_on_past looks at); a task with no instance there is left out."""
    previous = (
        select(dag_run.c.id)
        .where(dag_run.c.dag_id == dag_id, dag_run.c.logical_date < logical_date)
        .order_by(dag_run.c.logical_date.desc())
        .limit(1)
        .scalar_subquery()
    )
    rows = conn.execute(
        select(ti.c.task_id, ti.c.state).where(ti.c.run_pk == previous, ti.c.task_id.in_(task_ids))
    )
    return {task_id: state for task_id, state in rows}


_PENDING_TASK_STATES = [
    s.value for s in (TaskState.QUEUED, TaskState.RUNNING, TaskState.UP_FOR_RETRY)
]


def has_pending_tasks(conn: Connection, dag_id: str) -> bool:
    """Whether a task of the DAG, in any run, is queued, running or waiting for a retry."""
    busy = select(ti.c.id).where(ti.c.dag_id == dag_id, ti.c.state.in_(_PENDING_TASK_STATES))
    return conn.execute(busy.limit(1)).first() is not None


def all_finished(conn: Connection, run_pks: list[int]) -> bool:
    """Whether every one of these runs has ended (see ``runs_in_state`` on why no IN list)."""
    unfinished = {RunState.WAITING.value, RunState.QUEUED.value, RunState.RUNNING.value}
    stmt = select(dag_run.c.id).where(dag_run.c.state.in_(unfinished))
    return not set(run_pks) & set(conn.execute(stmt).scalars())

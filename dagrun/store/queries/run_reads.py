"""The statements of ``run_reads`` (see ``queries``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields

from sqlalchemy import BindParameter, Select, func, literal_column, select, union_all

from dagrun.states import (
    ACTIVE_RUN_STATES,
    FINISHED_TASK_STATES,
    RunState,
    RunType,
    TaskState,
)
from dagrun.store.run_reads import RunRow
from dagrun.store.schema import dag_run
from dagrun.store.schema import task_instance as ti
from dagrun.store.sql import Statement, name_all
from dagrun.store.sql import bind as _b
from dagrun.store.sql import bind_list as _many

#: A run's columns, as ``RunRow`` holds them.
RUNS = select(*[dag_run.c[f.name] for f in fields(RunRow)[:-1]], dag_run.c.conf)


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


_BETWEEN = (
    dag_run.c.dag_id == _b("dag_id"),
    dag_run.c.logical_date.between(_b("start"), _b("end")),
)


_BY_DATE = (dag_run.c.logical_date, dag_run.c.id)


RUNS_BETWEEN = Statement(
    "A DAG's runs with logical dates in [``b_start``, ``b_end``], oldest first.",
    RUNS.where(*_BETWEEN).order_by(*_BY_DATE),
)


SCHEDULED_RUNS_BETWEEN = Statement(
    "A DAG's runs that are not manual with logical dates in [``b_start``, ``b_end``], oldest "
    "first.",
    RUNS.where(*_BETWEEN, dag_run.c.run_type != RunType.MANUAL.value).order_by(*_BY_DATE),
)


RUN_BY_ID = Statement(
    "A DAG's run with this run id.",
    RUNS.where(dag_run.c.dag_id == _b("dag_id"), dag_run.c.run_id == _b("run_id")).limit(1),
)


RUNS_AT = Statement(
    "A DAG's runs at one logical date, in id order.",
    RUNS.where(
        dag_run.c.dag_id == _b("dag_id"), dag_run.c.logical_date == _b("logical_date")
    ).order_by(dag_run.c.id),
)


RUN_BY_PK = Statement("One run by its key.", RUNS.where(dag_run.c.id == _b("pk")))


PREVIOUS_SUCCESS = Statement(
    "The DAG's newest successful run before this one by logical date (Airflow's "
    "prev_*_success context names).",
    RUNS.where(
        dag_run.c.dag_id == _b("dag_id"),
        dag_run.c.logical_date < _b("logical_date"),
        dag_run.c.state == RunState.SUCCESS.value,
    )
    .order_by(dag_run.c.logical_date.desc())
    .limit(1),
)


NEWEST_RUN_AT = Statement(
    "The newest of a DAG's runs at one logical date.",
    select(dag_run.c.id)
    .where(dag_run.c.dag_id == _b("dag_id"), dag_run.c.logical_date == _b("logical_date"))
    .order_by(dag_run.c.id.desc())
    .limit(1),
)


RUN_STATE = Statement(
    "The state of one run.", select(dag_run.c.state).where(dag_run.c.id == _b("run_pk"))
)


TASK_STATES = Statement(
    "The states of some tasks' instances in a run (a mapped task has one per index).",
    select(ti.c.task_id, ti.c.state).where(
        ti.c.run_pk == _b("run_pk"), ti.c.task_id.in_(_many("task_ids"))
    ),
)


RUN_IDS_IN_STATE = Statement(
    "The ids of the runs in one state, oldest logical date first.",
    select(dag_run.c.id).where(dag_run.c.state == _b("state")).order_by(dag_run.c.logical_date),
)


UNFINISHED_RUN_IDS = Statement(
    "The ids of the runs not ended yet.",
    select(dag_run.c.id).where(dag_run.c.state.in_(_UNFINISHED)),
)


RUN_STATE_COUNTS = Statement(
    "How many of these runs are in each state.",
    select(dag_run.c.state, func.count())
    .where(dag_run.c.id.in_(_many("run_pks")))
    .group_by(dag_run.c.state),
)


TASK_STATE_COUNTS = Statement(
    "How many task instances of these runs are in each state.",
    select(ti.c.state, func.count()).where(ti.c.run_pk.in_(_many("run_pks"))).group_by(ti.c.state),
)


PENDING_TASK = Statement(
    "One task instance of a DAG that is queued, running or waiting for a retry or a poke, if any.",
    select(ti.c.id).where(ti.c.dag_id == _b("dag_id"), ti.c.state.in_(_PENDING)).limit(1),
)


ACTIVE_RUN = Statement(
    "One run that is queued or running, if any.",
    select(dag_run.c.id).where(dag_run.c.state.in_(_ACTIVE)).limit(1),
)


ACTIVE_RUN_OF_DAG = Statement(
    "One run of a DAG that is queued or running, if any.",
    select(dag_run.c.id)
    .where(dag_run.c.state.in_(_ACTIVE), dag_run.c.dag_id == _b("dag_id"))
    .limit(1),
)


RUN_BY_KEY = Statement(
    "The run of a DAG with this run id (manual runs are unique by it).",
    select(dag_run.c.id).where(dag_run.c.dag_id == _b("dag_id"), dag_run.c.run_id == _b("run_id")),
)


COUNT_ACTIVE_RUNS = Statement(
    "How many of a DAG's runs are queued or running (max_active_runs counts these).",
    select(func.count())
    .select_from(dag_run)
    .where(
        dag_run.c.dag_id == _b("dag_id"),
        dag_run.c.state.in_([s.value for s in ACTIVE_RUN_STATES]),
    ),
)


_WAITING = select(dag_run.c.id).where(
    dag_run.c.dag_id == _b("dag_id"),
    dag_run.c.state == RunState.WAITING.value,
    dag_run.c.not_before.is_(None) | (dag_run.c.not_before <= _b("now")),
)


WAITING_RUNS = Statement(
    "A DAG's waiting runs whose start time (spread, trigger --at) has come, oldest logical "
    "date first (the order of admission): a run delayed to later takes no slot meanwhile.",
    _WAITING.order_by(dag_run.c.logical_date),
)


WAITING_RUNS_NEWEST = Statement(
    "A DAG's waiting runs whose start time has come, newest logical date first (backfill "
    "--reverse).",
    _WAITING.order_by(dag_run.c.logical_date.desc()),
)


DUE_RUNS = Statement(
    "A DAG's queued runs whose start time (spread) has come, in id order.",
    select(dag_run.c.id)
    .where(
        dag_run.c.dag_id == _b("dag_id"),
        dag_run.c.state == RunState.QUEUED.value,
        dag_run.c.not_before.is_(None) | (dag_run.c.not_before <= _b("now")),
    )
    .order_by(dag_run.c.id),
)


RUN_TASK_STATES = Statement(
    "Every task instance state of these runs (what readiness decides from; a mapped task "
    "has a row per index).",
    select(ti.c.run_pk, ti.c.task_id, ti.c.state).where(ti.c.run_pk.in_(_many("run_pks"))),
)


SOME_TASK_STATES = Statement(
    "The states of some tasks of these runs: what readiness decides from after a commit "
    "(the tasks that ended, their downstream and those tasks' upstream).",
    select(ti.c.run_pk, ti.c.task_id, ti.c.state).where(
        ti.c.run_pk.in_(_many("run_pks")), ti.c.task_id.in_(_many("task_ids"))
    ),
)


RUNS_WITH_WORK_LEFT = Statement(
    "Which of these runs have a task instance not finished yet (read as far as the first).",
    select(dag_run.c.id).where(
        dag_run.c.id.in_(_many("run_pks")),
        select(ti.c.id)
        .where(
            ti.c.run_pk == dag_run.c.id,
            ti.c.state.not_in(sorted(s.value for s in FINISHED_TASK_STATES)),
        )
        .exists(),
    ),
)


_LOGICAL_DATE = select(dag_run.c.logical_date).where(dag_run.c.id == _b("run_pk"))


PREVIOUS_RUN = Statement(
    "The DAG's run just before this one by logical date (what depends_on_past looks at).",
    select(dag_run.c.id)
    .where(
        dag_run.c.dag_id == _b("dag_id"), dag_run.c.logical_date < _LOGICAL_DATE.scalar_subquery()
    )
    .order_by(dag_run.c.logical_date.desc())
    .limit(1),
)


NEXT_RUN = Statement(
    "The DAG's run just after this one by logical date (it may wait on this one's past).",
    select(dag_run.c.id)
    .where(
        dag_run.c.dag_id == _b("dag_id"), dag_run.c.logical_date > _LOGICAL_DATE.scalar_subquery()
    )
    .order_by(dag_run.c.logical_date)
    .limit(1),
)


RUNS_STARTED_BEFORE = Statement(
    "A DAG's running runs that started before ``b_before`` (dagrun_timeout), in id order.",
    select(dag_run.c.id)
    .where(
        dag_run.c.dag_id == _b("dag_id"),
        dag_run.c.state == RunState.RUNNING.value,
        dag_run.c.start_date < _b("before"),
    )
    .order_by(dag_run.c.id),
)


CLAIMED_RUNS = Statement(
    "What claimed attempts need of their runs: run id, dates, conf.",
    select(
        *dag_run.c["id", "run_id", "logical_date", "data_interval_start", "data_interval_end"],
        dag_run.c.conf,
    ).where(dag_run.c.id.in_(_many("run_pks"))),
)


UPSTREAM_VALUES = Statement(
    "The return values of some tasks of one run (TaskFlow data passing), a mapped task's "
    "in index order.",
    select(ti.c.task_id, ti.c.map_index, ti.c.return_value)
    .where(ti.c.run_pk == _b("run_pk"), ti.c.task_id.in_(_many("task_ids")))
    .order_by(ti.c.task_id, ti.c.map_index),
)


RUNS_BY_DATE = Statement(
    "Some DAGs' runs that are not manual ones, by DAG and logical date: the runs asset keys "
    "map to (``RUN_FOR_DATE`` for many).",
    select(dag_run.c.dag_id, dag_run.c.logical_date, dag_run.c.run_id).where(
        dag_run.c.dag_id.in_(_many("dag_ids")), dag_run.c.run_type != RunType.MANUAL.value
    ),
)


RUN_FOR_DATE = Statement(
    "A DAG's run (not a manual one) at a logical date: the run an asset key maps to.",
    select(dag_run.c.id, dag_run.c.state).where(
        dag_run.c.dag_id == _b("dag_id"),
        dag_run.c.logical_date == _b("logical_date"),
        dag_run.c.run_type != RunType.MANUAL.value,
    ),
)


name_all(globals(), prefix="run_reads.")


def run_list(flags: str) -> Statement:
    """The statement ``runs`` runs for the filters it was given: ``flags`` says ``y`` or
    ``n`` for a state, a date before, a limit and newest first."""
    state, before, limited, newest_first = (f == "y" for f in flags)
    stmt = RUNS.where(dag_run.c.dag_id == _b("dag_id"))
    if state:
        stmt = stmt.where(dag_run.c.state == _b("state"))
    if before:
        stmt = stmt.where(dag_run.c.logical_date < _b("before"))
    date = dag_run.c.logical_date
    stmt = stmt.order_by(date.desc() if newest_first else date)
    if limited:
        stmt = stmt.limit(_b("limit"))
    return Statement("A DAG's runs, as ``runs`` filters them.", stmt)


def _latest_run(dag_id: BindParameter) -> Select:
    scheduled = dag_run.c.run_type != literal_column(f"'{RunType.MANUAL.value}'")
    return (
        select(dag_run.c.dag_id, dag_run.c.logical_date)
        .where(dag_run.c.dag_id == dag_id, scheduled)
        .order_by(dag_run.c.logical_date.desc())
        .limit(1)
    )


def _recent_runs(dag_id: BindParameter) -> Select:
    newest = RUNS.where(dag_run.c.dag_id == dag_id).order_by(dag_run.c.logical_date.desc())
    return newest.limit(_b("per_dag"))


_PARTS: dict[str, Callable[[BindParameter], Select]] = {
    "latest_run": _latest_run,
    "recent_runs": _recent_runs,
}


def union(part: str, count: int) -> Statement:
    """``part`` for ``count`` DAGs (``b_dag_0`` ...) as one statement (``run_reads``
    reads every DAG's rows so, a chunk of DAGs at a time)."""
    parts = [_PARTS[part](_b(f"dag_{i}")) for i in range(count)]
    whole = parts[0] if count == 1 else union_all(*(p.subquery().select() for p in parts))
    return Statement(f"{part} of {count} DAGs.", whole)

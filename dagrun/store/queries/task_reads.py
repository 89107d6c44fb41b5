"""The statements of ``task_reads`` (see ``queries``)."""

from __future__ import annotations

from dataclasses import fields

from sqlalchemy import func, select

from dagrun.states import AttemptOutcome, CallbackState, TaskState
from dagrun.store.schema import callback, dag_run, in_state, task_attempt
from dagrun.store.schema import task_instance as ti
from dagrun.store.sql import Statement, name_all
from dagrun.store.sql import bind as _b
from dagrun.store.sql import bind_list as _many
from dagrun.store.task_reads import AttemptRow, Cell, TaskRow


def _columns(table, row_type) -> list:
    return [table.c[f.name] for f in fields(row_type)]


_TASKS = select(*_columns(ti, TaskRow))


TASKS_OF_RUNS = Statement(
    "The task instances of these runs, by run and in the order they were made.",
    _TASKS.where(ti.c.run_pk.in_(_many("run_pks"))).order_by(ti.c.run_pk, ti.c.id),
)


TASK_OF_RUN = Statement(
    "A task's instances in one run, by map index.",
    _TASKS.where(ti.c.run_pk == _b("run_pk"), ti.c.task_id == _b("task_id")).order_by(
        ti.c.map_index
    ),
)


NEWER_DATES = Statement(
    "A DAG's next ``b_limit`` logical dates after ``b_after``, oldest first.",
    select(dag_run.c.logical_date)
    .where(dag_run.c.dag_id == _b("dag_id"), dag_run.c.logical_date > _b("after"))
    .order_by(dag_run.c.logical_date)
    .limit(_b("limit")),
)


CELLS = Statement(
    "The grid cells of some runs.",
    select(*_columns(ti, Cell)).where(ti.c.run_pk.in_(_many("run_pks"))),
)


_ATTEMPTS = select(*_columns(task_attempt, AttemptRow))


TASK_ATTEMPTS = Statement(
    "The attempts of one task instance, in the order they started.",
    _ATTEMPTS.where(task_attempt.c.ti_id == _b("ti_id")).order_by(task_attempt.c.id),
)


RUN_ATTEMPTS = Statement(
    "The attempts of one run, in the order they started.",
    _ATTEMPTS.where(task_attempt.c.run_pk == _b("run_pk")).order_by(task_attempt.c.id),
)


ATTEMPT = Statement(
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


_DEAD = (
    select(ti.c.dag_id, ti.c.task_id, *dag_run.c["run_id", "logical_date"])
    .add_columns(ti.c.try_number, ti.c.last_error, ti.c.map_index)
    .join(dag_run, dag_run.c.id == ti.c.run_pk)
    .where(in_state(TaskState.FAILED))
    .order_by(ti.c.dag_id, dag_run.c.logical_date, ti.c.task_id, ti.c.map_index)
)


DEAD_LETTERS = Statement("Every task instance that failed for good.", _DEAD)


DAG_DEAD_LETTERS = Statement(
    "A DAG's task instances that failed for good.", _DEAD.where(ti.c.dag_id == _b("dag_id"))
)


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

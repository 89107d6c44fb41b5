"""The statements of ``retention`` (see ``queries``)."""

from __future__ import annotations

from sqlalchemy import and_, delete, exists, func, or_, select

from dagrun.states import CallbackState, RunState, TaskState
from dagrun.store.schema import (
    asset_event,
    audit_log,
    callback,
    dag,
    dag_run,
    partition_write,
    task_attempt,
    task_instance,
)
from dagrun.store.sql import Statement, name_all
from dagrun.store.sql import bind as _b
from dagrun.store.sql import bind_list as _many

#: A run in one of these states has ended; any other may still change.
FINISHED_RUNS = (RunState.SUCCESS, RunState.FAILED)


#: Task instances a worker holds or will claim: their run is not history yet.
_BUSY_TASKS = (
    TaskState.QUEUED,
    TaskState.RUNNING,
    TaskState.UP_FOR_RETRY,
    TaskState.UP_FOR_RESCHEDULE,
)


_OPEN_CALLBACKS = (CallbackState.PENDING, CallbackState.RUNNING)


ti = task_instance


_FINISHED = dag_run.c.state.in_([s.value for s in FINISHED_RUNS])


#: Nothing of the run is held by a worker or waits for one.
_IDLE = and_(
    ~exists().where(ti.c.run_pk == dag_run.c.id, ti.c.state.in_([s.value for s in _BUSY_TASKS])),
    ~exists().where(
        callback.c.run_pk == dag_run.c.id,
        callback.c.state.in_([s.value for s in _OPEN_CALLBACKS]),
    ),
)


DAGS = Statement(
    "Every DAG id, with its timezone (runs are found per DAG, by its date index).",
    select(dag.c.dag_id, dag.c.timezone),
)


OLD_RUNS = Statement(
    "A DAG's finished, idle runs with a logical date before ``b_before``, after the cursor "
    "(``b_after``, ``b_after_id``), oldest first: a range of the (dag_id, logical_date) index.",
    select(dag_run.c.id, dag_run.c.logical_date)
    .where(
        dag_run.c.dag_id == _b("dag_id"),
        dag_run.c.logical_date < _b("before"),
        dag_run.c.logical_date >= _b("after"),
        or_(dag_run.c.logical_date > _b("after"), dag_run.c.id > _b("after_id")),
        _FINISHED,
        _IDLE,
    )
    .order_by(dag_run.c.logical_date, dag_run.c.id)
    .limit(_b("limit")),
)


LOCK_OLD_RUNS = Statement(
    "Of a batch of runs, lock those still finished and idle (SKIP LOCKED: a run someone holds "
    "is passed over), in id order.",
    select(dag_run.c.id)
    .where(dag_run.c.id.in_(_many("run_pks")), _FINISHED, _IDLE)
    .order_by(dag_run.c.id)
    .with_for_update(skip_locked=True),
)


def _logs(table, *where):
    """The log files ``table``'s rows (those ``where`` picks) point into, with how many rows
    each."""
    return (
        select(table.c.log_path, func.count())
        .where(*where, table.c.log_path.is_not(None))
        .group_by(table.c.log_path)
    )


def _count(run_pk):
    """How many rows the runs ``b_run_pks`` have in the table of ``run_pk`` (their run)."""
    return select(func.count()).select_from(run_pk.table).where(run_pk.in_(_many("run_pks")))


def _delete(run_pk, *guard):
    """Delete the rows the runs ``b_run_pks`` have in the table of ``run_pk``."""
    return delete(run_pk.table).where(run_pk.in_(_many("run_pks")), *guard)


ATTEMPT_LOGS = Statement(
    "The log files the attempts of some runs point into, with how many attempts each.",
    _logs(task_attempt, task_attempt.c.run_pk.in_(_many("run_pks"))),
)


CALLBACK_LOGS = Statement(
    "The log files the callbacks of some runs point into, with how many callbacks each.",
    _logs(callback, callback.c.run_pk.in_(_many("run_pks"))),
)


ATTEMPT_LOG_REFS = Statement(
    "Every log file attempts point into, with how many attempts each.", _logs(task_attempt)
)


CALLBACK_LOG_REFS = Statement(
    "Every log file callbacks point into, with how many callbacks each.", _logs(callback)
)


COUNT_CALLBACKS = Statement("How many callbacks some runs have.", _count(callback.c.run_pk))


DELETE_CALLBACKS = Statement("Delete the callbacks of some runs.", _delete(callback.c.run_pk))


COUNT_WRITES = Statement(
    "How many partition-write records some runs have.",
    _count(partition_write.c.run_pk),
)


DELETE_WRITES = Statement(
    "Delete the partition-write records of some runs.",
    _delete(partition_write.c.run_pk),
)


COUNT_ATTEMPTS = Statement("How many attempts some runs have.", _count(task_attempt.c.run_pk))


DELETE_ATTEMPTS = Statement("Delete the attempts of some runs.", _delete(task_attempt.c.run_pk))


COUNT_TASKS = Statement("How many task instances some runs have.", _count(ti.c.run_pk))


DELETE_TASKS = Statement("Delete the task instances of some runs.", _delete(ti.c.run_pk))


COUNT_RUNS = Statement("How many of some runs there are.", _count(dag_run.c.id))


DELETE_RUNS = Statement(
    "Delete some runs that are still finished.", _delete(dag_run.c.id, _FINISHED)
)


_newer = asset_event.alias("newer")


_SUPERSEDED = and_(
    asset_event.c.created_at < _b("before"),
    exists().where(
        _newer.c.asset == asset_event.c.asset,
        _newer.c.partition_key == asset_event.c.partition_key,
        _newer.c.id > asset_event.c.id,
    ),
)


_OLD_AUDIT = audit_log.c.at < _b("before")


def _next_ids(table, old):
    """The next ``b_limit`` ids of ``table``'s ``old`` rows after ``b_after``, in order."""
    return (
        select(table.c.id)
        .where(table.c.id > _b("after"), old)
        .order_by(table.c.id)
        .limit(_b("limit"))
    )


def _delete_ids(table, old):
    """Delete ``table``'s rows ``b_ids`` that are still ``old``."""
    return delete(table).where(table.c.id.in_(_many("ids")), old)


NEXT_ASSET_EVENTS = Statement(
    "The next superseded asset events to delete, by id after ``b_after``.",
    _next_ids(asset_event, _SUPERSEDED),
)


COUNT_ASSET_EVENTS = Statement(
    "How many superseded asset events are to go.",
    select(func.count()).select_from(asset_event).where(_SUPERSEDED),
)


DELETE_ASSET_EVENTS = Statement(
    "Delete asset events by id (still superseded).", _delete_ids(asset_event, _SUPERSEDED)
)


NEXT_AUDIT_ROWS = Statement(
    "The next old audit rows to delete, by id after ``b_after``.",
    _next_ids(audit_log, _OLD_AUDIT),
)


COUNT_AUDIT_ROWS = Statement(
    "How many old audit rows are to go.",
    select(func.count()).select_from(audit_log).where(_OLD_AUDIT),
)


DELETE_AUDIT_ROWS = Statement(
    "Delete audit rows by id (still old).", _delete_ids(audit_log, _OLD_AUDIT)
)


name_all(globals(), prefix="retention.")

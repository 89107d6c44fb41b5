"""The statements of ``metrics`` (see ``queries``)."""

from __future__ import annotations

from sqlalchemy import Select, and_, func, select

from dagrun.states import AttemptOutcome, RunType, TaskState
from dagrun.store.schema import (
    callback,
    dag_cap,
    dag_run,
    in_state,
    pool,
    task_attempt,
)
from dagrun.store.schema import task_instance as ti
from dagrun.store.sql import Statement, name_all
from dagrun.store.sql import bind as _b
from dagrun.store.sql import bind_list as _many


def _by(*columns) -> Select:
    """Rows counted by the values of ``columns``."""
    return select(*columns, func.count()).group_by(*columns)


RUN_STATES = Statement("How many runs are in each state.", _by(dag_run.c.state))


TASK_STATES = Statement("How many task instances are in each state.", _by(ti.c.state))


DAG_RUN_STATES = Statement(
    "How many runs of each DAG are in each state.", _by(dag_run.c.dag_id, dag_run.c.state)
)


DAG_TASK_STATES = Statement(
    "How many task instances of each DAG are in each state.", _by(ti.c.dag_id, ti.c.state)
)


DAG_CALLBACK_STATES = Statement(
    "How many callbacks of each DAG are in each state.",
    _by(callback.c.dag_id, callback.c.state),
)


OLDEST_QUEUED = Statement(
    "When the task instance queued longest was queued.",
    select(func.min(ti.c.queued_at)).where(in_state(TaskState.QUEUED)),
)


EXPIRED_LEASES = Statement(
    "How many running task instances hold a lease that ran out before ``b_now``.",
    select(func.count())
    .select_from(ti)
    .where(in_state(TaskState.RUNNING), ti.c.lease_until < _b("now")),
)


STALE_COMPLETIONS = Statement(
    "How many attempts reported a result after their lease was lost.",
    select(func.count())
    .select_from(task_attempt)
    .where(
        (task_attempt.c.outcome == AttemptOutcome.STALE.value)
        | task_attempt.c.late_result.is_not(None)
    ),
)


_SCHEDULED = dag_run.c.run_type == RunType.SCHEDULED.value


_LATEST_DATES = (
    select(dag_run.c.dag_id, func.max(dag_run.c.logical_date).label("at"))
    .where(_SCHEDULED)
    .group_by(dag_run.c.dag_id)
    .subquery()
)


LATEST = Statement(
    "Each DAG's latest scheduled run: when it was created and when it was due.",
    select(dag_run.c.dag_id, dag_run.c.created_at, dag_run.c.data_interval_end)
    .join(
        _LATEST_DATES,
        and_(
            dag_run.c.dag_id == _LATEST_DATES.c.dag_id,
            dag_run.c.logical_date == _LATEST_DATES.c.at,
        ),
    )
    .where(_SCHEDULED),
)


POOL_OLDEST = Statement(
    "When each pool's (or no pool's) task instance queued longest was queued.",
    select(ti.c.pool, func.min(ti.c.queued_at))
    .where(in_state(TaskState.QUEUED))
    .group_by(ti.c.pool),
)


def _by_key(key, *where) -> Select:
    return select(key, func.count()).where(*where).group_by(key)


def _running(key) -> Select:
    """The running task instances of the keys ``b_keys``, counted by ``key``."""
    return _by_key(key, in_state(TaskState.RUNNING), key.in_(_many("keys")))


_QUEUED = in_state(TaskState.QUEUED)


POOL_SLOTS = Statement("Every pool's slots.", select(pool.c.name, pool.c.slots))


DAG_CAPS = Statement(
    "Every DAG cap's max_active_tasks.", select(dag_cap.c.dag_id, dag_cap.c.max_active_tasks)
)


_POOLED, _CAPPED = ti.c.pool.is_not(None), ti.c.capped.is_(True)
QUEUED_BY_POOL = Statement("Queued task instances by pool.", _by_key(ti.c.pool, _QUEUED, _POOLED))


RUNNING_BY_POOL = Statement("Running task instances by pool.", _running(ti.c.pool))


QUEUED_BY_CAP = Statement("Queued capped tasks by DAG.", _by_key(ti.c.dag_id, _QUEUED, _CAPPED))


RUNNING_BY_CAP = Statement("Running task instances by DAG.", _running(ti.c.dag_id))


name_all(globals(), prefix="metrics.")

"""The numbers an operator alerts on, read from one snapshot for ``/metrics``.

Lag and stuck work show here before users notice: how late the scheduler creates runs,
how long the oldest queued task has waited in each pool, tasks held back by a full pool or
a DAG's ``max_active_tasks``, runs blocked by ``depends_on_past``, callbacks that failed.
Every label is a DAG id, a pool name or a state, so the number of series grows with the
number of DAGs and pools, never with runs or task instances.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import Connection, Select, and_, func, select

from dagrun.states import AttemptOutcome, RunState, RunType, TaskState
from dagrun.store import dag_reads, runs, sql
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


@dataclass(frozen=True)
class Metrics:
    runs: dict[str, int]
    task_instances: dict[str, int]
    queued: int
    oldest_queued_age: float
    expired_leases: int
    stale_completions: int
    #: (dag_id, state) -> count, for runs and for task instances.
    dag_runs: dict[tuple[str, str], int] = field(default_factory=dict)
    dag_task_instances: dict[tuple[str, str], int] = field(default_factory=dict)
    #: dag_id -> seconds between its latest scheduled run's due time and its creation.
    scheduler_lag: dict[str, float] = field(default_factory=dict)
    #: pool ("" for none) -> seconds its oldest queued task instance has waited.
    pool_oldest_queued_age: dict[str, float] = field(default_factory=dict)
    #: pool -> queued task instances it holds back (it is full, or nobody created it).
    pool_waiting: dict[str, int] = field(default_factory=dict)
    #: dag_id -> queued task instances its max_active_tasks holds back.
    cap_waiting: dict[str, int] = field(default_factory=dict)
    #: dag_id -> waiting runs that wait on a previous run (depends_on_past).
    blocked_on_past: dict[str, int] = field(default_factory=dict)
    #: (dag_id, state) -> callbacks that were sent or failed.
    callbacks: dict[tuple[str, str], int] = field(default_factory=dict)


def metrics(conn: Connection, now: datetime) -> Metrics:
    """Every metric from one read transaction; every known state is present, zero or not."""
    runs_ = dict.fromkeys((s.value for s in RunState), 0) | _counts(conn, _RUN_STATES)
    tis = dict.fromkeys((s.value for s in TaskState), 0) | _counts(conn, _TASK_STATES)
    oldest = sql.scalar(conn, _OLDEST_QUEUED)
    return Metrics(
        runs=runs_,
        task_instances=tis,
        queued=tis[TaskState.QUEUED.value],
        oldest_queued_age=_age(now, oldest),
        expired_leases=sql.scalar(conn, _EXPIRED_LEASES, {"b_now": now}),
        stale_completions=sql.scalar(conn, _STALE_COMPLETIONS),
        dag_runs=_counts(conn, _DAG_RUN_STATES),
        dag_task_instances=_counts(conn, _DAG_TASK_STATES),
        scheduler_lag=_scheduler_lag(conn),
        pool_oldest_queued_age=_pool_ages(conn, now),
        pool_waiting=_pool_waiting(conn),
        cap_waiting=_cap_waiting(conn),
        blocked_on_past=_blocked_on_past(conn, now),
        callbacks=_counts(conn, _DAG_CALLBACK_STATES),
    )


def _by(*columns) -> Select:
    """Rows counted by the values of ``columns``."""
    return select(*columns, func.count()).group_by(*columns)


_RUN_STATES = Statement("How many runs are in each state.", _by(dag_run.c.state))
_TASK_STATES = Statement("How many task instances are in each state.", _by(ti.c.state))
_DAG_RUN_STATES = Statement(
    "How many runs of each DAG are in each state.", _by(dag_run.c.dag_id, dag_run.c.state)
)
_DAG_TASK_STATES = Statement(
    "How many task instances of each DAG are in each state.", _by(ti.c.dag_id, ti.c.state)
)
_DAG_CALLBACK_STATES = Statement(
    "How many callbacks of each DAG are in each state.",
    _by(callback.c.dag_id, callback.c.state),
)
_OLDEST_QUEUED = Statement(
    "When the task instance queued longest was queued.",
    select(func.min(ti.c.queued_at)).where(in_state(TaskState.QUEUED)),
)
_EXPIRED_LEASES = Statement(
    "How many running task instances hold a lease that ran out before ``b_now``.",
    select(func.count())
    .select_from(ti)
    .where(in_state(TaskState.RUNNING), ti.c.lease_until < _b("now")),
)
_STALE_COMPLETIONS = Statement(
    "How many attempts reported a result after their lease was lost.",
    select(func.count())
    .select_from(task_attempt)
    .where(
        (task_attempt.c.outcome == AttemptOutcome.STALE.value)
        | task_attempt.c.late_result.is_not(None)
    ),
)


def _counts(conn: Connection, statement: Statement) -> dict:
    """Rows by the values of a ``_by`` statement's columns (one column: by its value; more:
    by a tuple)."""
    found: Counter = Counter()
    for *key, n in sql.tuples(conn, statement):
        found[key[0] if len(key) == 1 else tuple(key)] = n
    return dict(found)


def _age(now: datetime, since: datetime | None) -> float:
    return max(0.0, (now - since).total_seconds()) if since is not None else 0.0


def _scheduler_lag(conn: Connection) -> dict[str, float]:
    """Per DAG, its latest scheduled run's creation minus its due time (the end of its
    data interval): how far behind the scheduler was when it made that run."""
    return {dag_id: _age(created, due) for dag_id, created, due in sql.tuples(conn, _LATEST)}


_SCHEDULED = dag_run.c.run_type == RunType.SCHEDULED.value
_LATEST_DATES = (
    select(dag_run.c.dag_id, func.max(dag_run.c.logical_date).label("at"))
    .where(_SCHEDULED)
    .group_by(dag_run.c.dag_id)
    .subquery()
)
_LATEST = Statement(
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


def _pool_ages(conn: Connection, now: datetime) -> dict[str, float]:
    return {name or "": _age(now, oldest) for name, oldest in sql.tuples(conn, _POOL_OLDEST)}


_POOL_OLDEST = Statement(
    "When each pool's (or no pool's) task instance queued longest was queued.",
    select(ti.c.pool, func.min(ti.c.queued_at))
    .where(in_state(TaskState.QUEUED))
    .group_by(ti.c.pool),
)


def _pool_waiting(conn: Connection) -> dict[str, int]:
    """Queued task instances of pools that are full or missing: they wait on the pool."""
    slots = dict(sql.tuples(conn, _POOL_SLOTS))
    return _held_back(conn, _QUEUED_BY_POOL, _RUNNING_BY_POOL, slots, missing_holds=True)


def _cap_waiting(conn: Connection) -> dict[str, int]:
    """Queued task instances of DAGs whose max_active_tasks are all running."""
    caps = dict(sql.tuples(conn, _DAG_CAPS))
    return _held_back(conn, _QUEUED_BY_CAP, _RUNNING_BY_CAP, caps, missing_holds=False)


def _held_back(
    conn: Connection,
    queued_by: Statement,
    running_by: Statement,
    limits: dict[str, int],
    *,
    missing_holds: bool,
) -> dict[str, int]:
    """Queued task instances per key (``queued_by`` counts them) whose limit is all taken
    by running ones (``running_by``, of the keys ``b_keys``); a key with no limit holds its
    tasks back if ``missing_holds`` (a pool nobody created), else not (a DAG that dropped
    its cap)."""
    queued = dict(sql.tuples(conn, queued_by))
    if not queued:
        return {}
    running = dict(sql.tuples(conn, running_by, {"b_keys": list(queued)}))
    return {
        name: n
        for name, n in queued.items()
        if (running.get(name, 0) >= limits[name] if name in limits else missing_holds)
    }


def _by_key(key, *where) -> Select:
    return select(key, func.count()).where(*where).group_by(key)


def _running(key) -> Select:
    """The running task instances of the keys ``b_keys``, counted by ``key``."""
    return _by_key(key, in_state(TaskState.RUNNING), key.in_(_many("keys")))


_QUEUED = in_state(TaskState.QUEUED)
_POOLED, _CAPPED = ti.c.pool.is_not(None), ti.c.capped.is_(True)
_POOL_SLOTS = Statement("Every pool's slots.", select(pool.c.name, pool.c.slots))
_DAG_CAPS = Statement(
    "Every DAG cap's max_active_tasks.", select(dag_cap.c.dag_id, dag_cap.c.max_active_tasks)
)
_QUEUED_BY_POOL = Statement("Queued task instances by pool.", _by_key(ti.c.pool, _QUEUED, _POOLED))
_RUNNING_BY_POOL = Statement("Running task instances by pool.", _running(ti.c.pool))
_QUEUED_BY_CAP = Statement("Queued capped tasks by DAG.", _by_key(ti.c.dag_id, _QUEUED, _CAPPED))
_RUNNING_BY_CAP = Statement("Running task instances by DAG.", _running(ti.c.dag_id))


def _blocked_on_past(conn: Connection, now: datetime) -> dict[str, int]:
    """Per DAG with depends_on_past tasks: its waiting runs, when the next one may not be
    admitted because the run before it has not succeeded (admission takes them one at a
    time, so one blocked run holds back all that follow)."""
    found = {}
    for row in dag_reads.active_dags(conn):
        spec = row.spec
        if not any(t.depends_on_past for t in spec.tasks):
            continue
        waiting = runs.count_waiting_runs(conn, spec.dag_id, now)
        if waiting and not runs.admissible(conn, spec, 1, now):
            found[spec.dag_id] = waiting
    return found


name_all(globals(), prefix="metrics.")

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
from typing import TYPE_CHECKING

from dagrun.states import RunState, TaskState
from dagrun.store import dag_reads, runs, sql

if TYPE_CHECKING:
    from sqlalchemy import Connection


#: The statements of this module (``queries/metrics.py``).
Q = sql.Catalogue("dagrun.store.queries.metrics", "metrics.")


@dataclass(frozen=True)
class Metrics:
    """What the web page's ``/metrics`` reports: runs, task instances, the queue and leases."""

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
    runs_ = dict.fromkeys((s.value for s in RunState), 0) | _counts(conn, Q.RUN_STATES)
    tis = dict.fromkeys((s.value for s in TaskState), 0) | _counts(conn, Q.TASK_STATES)
    oldest = sql.scalar(conn, Q.OLDEST_QUEUED)
    return Metrics(
        runs=runs_,
        task_instances=tis,
        queued=tis[TaskState.QUEUED.value],
        oldest_queued_age=_age(now, oldest),
        expired_leases=sql.scalar(conn, Q.EXPIRED_LEASES, {"b_now": now}),
        stale_completions=sql.scalar(conn, Q.STALE_COMPLETIONS),
        dag_runs=_counts(conn, Q.DAG_RUN_STATES),
        dag_task_instances=_counts(conn, Q.DAG_TASK_STATES),
        scheduler_lag=_scheduler_lag(conn),
        pool_oldest_queued_age=_pool_ages(conn, now),
        pool_waiting=_pool_waiting(conn),
        cap_waiting=_cap_waiting(conn),
        blocked_on_past=_blocked_on_past(conn, now),
        callbacks=_counts(conn, Q.DAG_CALLBACK_STATES),
    )


def _counts(conn: Connection, statement: sql.Named) -> dict:
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
    return {dag_id: _age(created, due) for dag_id, created, due in sql.tuples(conn, Q.LATEST)}


def _pool_ages(conn: Connection, now: datetime) -> dict[str, float]:
    return {name or "": _age(now, oldest) for name, oldest in sql.tuples(conn, Q.POOL_OLDEST)}


def _pool_waiting(conn: Connection) -> dict[str, int]:
    """Queued task instances of pools that are full or missing: they wait on the pool."""
    slots = dict(sql.tuples(conn, Q.POOL_SLOTS))
    return _held_back(conn, Q.QUEUED_BY_POOL, Q.RUNNING_BY_POOL, slots, missing_holds=True)


def _cap_waiting(conn: Connection) -> dict[str, int]:
    """Queued task instances of DAGs whose max_active_tasks are all running."""
    caps = dict(sql.tuples(conn, Q.DAG_CAPS))
    return _held_back(conn, Q.QUEUED_BY_CAP, Q.RUNNING_BY_CAP, caps, missing_holds=False)


def _held_back(
    conn: Connection,
    queued_by: sql.Named,
    running_by: sql.Named,
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

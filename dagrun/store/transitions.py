"""Every statement that creates, admits, claims, leases, completes, reaps or clears.

This module is the whole concurrency story of dagrun. The rules it keeps:

* Each transition is a guarded UPDATE: it names the state it expects (and, for work a worker
  holds, the lease owner and fence token) and checks the row count. Zero rows means someone
  else moved the row first: a lost lease, a cleared task, a second scheduler.
* Claims are short transactions committed before any task runs. On PostgreSQL they select
  with ``FOR UPDATE SKIP LOCKED`` so many workers claim disjoint rows without waiting; on
  SQLite every write transaction is ``BEGIN IMMEDIATE``, so there is one writer at a time.
* Per-DAG decisions (creating and admitting runs) lock the DAG row, and per-run decisions
  (which tasks are ready, whether the run is over) lock the run row, so two processes never
  act on the same stale picture. The unique keys catch anything that slips past.
* Run rows are always locked in id order (ORDER BY id, sorted batches), so two transactions
  that each lock several runs can never deadlock on PostgreSQL.
* Every attempt gets exactly one outcome in ``task_attempt``, including the stale ones.

Callers pass ``now`` from ``Store.now()``: the database server's clock on PostgreSQL.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, and_, bindparam, func, insert, select, tuple_, update

from dagrun.errors import LeaseLost
from dagrun.logfiles import LogRange
from dagrun.retry import backoff_delay
from dagrun.spec import DagSpec, TaskSpec
from dagrun.states import (
    ACTIVE_RUN_STATES,
    AttemptOutcome,
    RunState,
    RunType,
    TaskState,
)
from dagrun.store import compiled
from dagrun.store.engine import WORK_CHANNEL, Capabilities, dialect_insert
from dagrun.store.schema import (
    dag,
    dag_run,
    in_state,
    partition_write,
    pool,
    task_attempt,
    task_instance,
)
from dagrun.timetable import DataInterval
from dagrun.triggers import Decisions, evaluate

ti = task_instance
SpecLookup = Callable[[str], DagSpec]
DEFAULT_LEASE_LOSS_BUDGET = 3


def run_id_for(run_type: RunType, logical_date: datetime) -> str:
    return f"{run_type.value}__{logical_date.isoformat()}"


# ---------------------------------------------------------------- runs: create, admit, start


def lock_dag(conn: Connection, caps: Capabilities, dag_id: str, *, skip_locked: bool) -> bool:
    """Take the DAG row lock that serialises run creation and admission for one DAG.

    With ``skip_locked`` a second scheduler passes over a DAG another one is handling
    (returns False) instead of waiting for it.
    """
    stmt = _LOCK_DAG_SKIP if caps.skip_locked and skip_locked else _LOCK_DAG
    return conn.execute(stmt, {"b_dag_id": dag_id}).first() is not None


_DAG_ROW = select(dag.c.dag_id).where(dag.c.dag_id == bindparam("b_dag_id"))
_LOCK_DAG = _DAG_ROW.with_for_update()
_LOCK_DAG_SKIP = _DAG_ROW.with_for_update(skip_locked=True)


def create_runs(
    conn: Connection,
    spec: DagSpec,
    intervals: Iterable[DataInterval],
    run_type: RunType,
    now: datetime,
    start_delay: timedelta = timedelta(0),
) -> int:
    """Insert a waiting run per interval; an existing run for the date is left alone."""
    rows = [
        {
            "dag_id": spec.dag_id,
            "run_id": run_id_for(run_type, i.start),
            "logical_date": i.start,
            "data_interval_start": i.start,
            "data_interval_end": i.end,
            "run_type": run_type.value,
            "state": RunState.WAITING.value,
            "not_before": i.end + start_delay if start_delay else None,
            "created_at": now,
        }
        for i in intervals
    ]
    if not rows:
        return 0
    stmt = dialect_insert(conn.dialect.name, dag_run).on_conflict_do_nothing()
    return len(conn.execute(stmt.returning(dag_run.c.id), rows).all())


def create_manual_run(
    conn: Connection,
    spec: DagSpec,
    interval: DataInterval,
    run_id: str,
    now: datetime,
    conf: dict | None = None,
) -> tuple[int, bool]:
    """A manual run for ``interval``; returns (run pk, created). An existing key is reused."""
    existing = conn.execute(
        select(dag_run.c.id).where(
            dag_run.c.dag_id == spec.dag_id,
            (dag_run.c.run_id == run_id) | (dag_run.c.logical_date == interval.start),
        )
    ).scalar()
    if existing is not None:
        return existing, False
    pk = conn.execute(
        insert(dag_run)
        .values(
            dag_id=spec.dag_id,
            run_id=run_id,
            logical_date=interval.start,
            data_interval_start=interval.start,
            data_interval_end=interval.end,
            run_type=RunType.MANUAL.value,
            state=RunState.WAITING.value,
            conf=json.dumps(conf) if conf else None,
            created_at=now,
        )
        .returning(dag_run.c.id)
    ).scalar_one()
    return pk, True


def set_cursor(conn: Connection, dag_id: str, next_logical_date: datetime | None) -> None:
    """Advance the scheduler's per-DAG cursor: the next logical date it will consider."""
    conn.execute(
        update(dag).where(dag.c.dag_id == dag_id).values(next_logical_date=next_logical_date)
    )


def count_active_runs(conn: Connection, dag_id: str) -> int:
    return compiled.rows(conn, _COUNT_ACTIVE, {"b_dag_id": dag_id})[0][0]


def count_waiting_runs(conn: Connection, dag_id: str) -> int:
    return len(conn.execute(_WAITING_RUNS, {"b_dag_id": dag_id}).all())


def admit_runs(
    conn: Connection,
    spec: DagSpec,
    max_active: int,
    now: datetime,
    *,
    newest_first: bool = False,
    run_pks: Iterable[int] | None = None,
) -> list[int]:
    """Move waiting runs to queued while queued + running stays within ``max_active``.

    Oldest logical date first (newest first for ``backfill --reverse``). ``run_pks`` limits
    admission to those runs (a backfill admits its own). Task instances are created here,
    so a task added to the DAG since the run was made is part of the run when it starts.
    The caller holds the DAG lock.
    """
    free = max_active - count_active_runs(conn, spec.dag_id)
    if free <= 0:
        return []
    admitted = _next_waiting(conn, spec.dag_id, free, newest_first, run_pks)
    if admitted:
        compiled.execute_many(
            conn,
            _SET_RUN_STATE,
            [
                {"b_run_pk": pk, "b_from": RunState.WAITING.value, "b_to": RunState.QUEUED.value}
                for pk in sorted(admitted)
            ],
        )
        ensure_task_instances(conn, spec, admitted)
    return admitted


def _next_waiting(
    conn: Connection,
    dag_id: str,
    free: int,
    newest_first: bool,
    run_pks: Iterable[int] | None,
) -> list[int]:
    """The first ``free`` waiting runs in admission order (among ``run_pks`` if given),
    read only as far as needed: a backfill admits a few runs at a time out of hundreds."""
    wanted = None if run_pks is None else set(run_pks)
    statement = _WAITING_RUNS_NEWEST if newest_first else _WAITING_RUNS
    cursor = compiled.execute(conn, statement, {"b_dag_id": dag_id})
    found: list[int] = []
    try:
        for (pk,) in cursor:
            if wanted is None or pk in wanted:
                found.append(pk)
                if len(found) == free:
                    break
    finally:
        cursor.close()
    return found


_COUNT_ACTIVE = (
    select(func.count())
    .select_from(dag_run)
    .where(
        dag_run.c.dag_id == bindparam("b_dag_id"),
        dag_run.c.state.in_([s.value for s in ACTIVE_RUN_STATES]),
    )
)
_WAITING = select(dag_run.c.id).where(
    dag_run.c.dag_id == bindparam("b_dag_id"), dag_run.c.state == RunState.WAITING.value
)
_WAITING_RUNS = _WAITING.order_by(dag_run.c.logical_date)
_WAITING_RUNS_NEWEST = _WAITING.order_by(dag_run.c.logical_date.desc())
_SET_RUN_STATE = (
    update(dag_run)
    .where(dag_run.c.id == bindparam("b_run_pk"), dag_run.c.state == bindparam("b_from"))
    .values(state=bindparam("b_to"))
)


def ensure_task_instances(conn: Connection, spec: DagSpec, run_pks: list[int]) -> None:
    """Insert the missing task instances (state none) of each run."""
    rows = [
        {
            "run_pk": pk,
            "dag_id": spec.dag_id,
            "task_id": t.task_id,
            "state": TaskState.NONE.value,
            "max_tries": t.max_tries,
            "priority_weight": t.priority_weight,
            "pool": t.pool,
        }
        for pk in run_pks
        for t in spec.tasks
    ]
    compiled.execute_many(conn, _new_task_instances(conn.dialect.name), rows)


@functools.cache
def _new_task_instances(dialect: str):
    """INSERT of a run's task instances that leaves existing ones alone (per dialect:
    ``ON CONFLICT`` is spelled by the dialect's own insert)."""
    columns = ("run_pk", "dag_id", "task_id", "state", "max_tries", "priority_weight", "pool")
    return (
        dialect_insert(dialect, ti)
        .values(
            {
                **{c: bindparam(c) for c in columns},
                **dict.fromkeys(("try_number", "failures", "lease_losses", "fence_token"), 0),
            }
        )
        .on_conflict_do_nothing()
    )


def start_runs(conn: Connection, spec: DagSpec, now: datetime) -> list[int]:
    """Queued runs whose start time (``spread``) has come become running; roots get queued."""
    due = [r.id for r in compiled.rows(conn, _DUE_RUNS, {"b_dag_id": spec.dag_id, "b_now": now})]
    if due:
        compiled.execute_many(conn, _START_RUN, [{"b_run_pk": pk, "b_now": now} for pk in due])
        advance_runs(conn, dict.fromkeys(due, spec), now)
    return due


_DUE_RUNS = (
    select(dag_run.c.id)
    .where(
        dag_run.c.dag_id == bindparam("b_dag_id"),
        dag_run.c.state == RunState.QUEUED.value,
        (dag_run.c.not_before.is_(None)) | (dag_run.c.not_before <= bindparam("b_now")),
    )
    .order_by(dag_run.c.id)
)
_START_RUN = (
    update(dag_run)
    .where(dag_run.c.id == bindparam("b_run_pk"), dag_run.c.state == RunState.QUEUED.value)
    .values(state=RunState.RUNNING.value, start_date=bindparam("b_now"), end_date=None)
)


def advance_run(conn: Connection, run_pk: int, spec: DagSpec, now: datetime) -> Decisions:
    """Apply the trigger rules to one running run (see ``advance_runs``)."""
    return advance_runs(conn, {run_pk: spec}, now).get(run_pk, Decisions())


def advance_runs(conn: Connection, runs: dict[int, DagSpec], now: datetime) -> dict[int, Decisions]:
    """Apply the trigger rules to running runs: queue ready tasks, end the runs that are done.

    Locks the run rows first (in id order, so two lockers never deadlock), so two workers
    finishing the two upstreams of one task at once both see each other's result and the
    task is queued exactly once. One read of the runs and one of their task instances serve
    every run a group commit touched.
    """
    pks = sorted(runs)
    if not pks:
        return {}
    locked = dict(compiled.tuples(conn, _LOCK_RUNS, {"b_run_pks": pks}))
    running = [pk for pk in pks if locked.get(pk) == RunState.RUNNING.value]
    states: dict[int, dict[str, TaskState]] = {pk: {} for pk in running}
    if running:
        for run_pk, task_id, state in compiled.tuples(
            conn, _RUNS_TASK_STATES, {"b_run_pks": running}
        ):
            states[run_pk][task_id] = _TASK_STATES[state]
    decided: dict[int, Decisions] = {}
    for pk in running:
        spec = runs[pk]
        past = _past_ok(conn, spec, pk) if _needs_past(spec, states[pk]) else None
        decided[pk] = evaluate(spec, states[pk], past)
    _apply(conn, decided, now)
    return decided


def announce_work(conn: Connection) -> None:
    """Tell listening workers, when this transaction commits, that tasks were queued
    (PostgreSQL's NOTIFY; one per transaction however often it is called)."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"NOTIFY {WORK_CHANNEL}")


def _apply(conn: Connection, decided: dict[int, Decisions], now: datetime) -> None:
    """Write the decisions of ``advance_runs``: one batched statement per kind of change."""
    changes = [
        (TaskState.QUEUED, _QUEUE_TASK, lambda d: d.queue),
        (TaskState.UPSTREAM_FAILED, _END_TASK, lambda d: d.upstream_failed),
        (TaskState.SKIPPED, _END_TASK, lambda d: d.skip),
    ]
    for state, statement, chosen in changes:
        rows = [
            {"b_run_pk": pk, "b_task_id": task_id, "b_state": state.value, "b_now": now}
            for pk, d in decided.items()
            for task_id in chosen(d)
        ]
        if compiled.execute_many(conn, statement, rows) and state == TaskState.QUEUED:
            announce_work(conn)
    ended = [
        {"b_run_pk": pk, "b_state": d.run_state.value, "b_now": now}
        for pk, d in decided.items()
        if d.run_state is not None
    ]
    compiled.execute_many(conn, _END_RUN, ended)


_TASK_STATES = {s.value: s for s in TaskState}
_LOCK_RUNS = (
    select(dag_run.c.id, dag_run.c.state)
    .where(dag_run.c.id.in_(bindparam("b_run_pks", expanding=True)))
    .order_by(dag_run.c.id)
    .with_for_update()
)
_RUNS_TASK_STATES = select(ti.c.run_pk, ti.c.task_id, ti.c.state).where(
    ti.c.run_pk.in_(bindparam("b_run_pks", expanding=True))
)
_END_RUN = (
    update(dag_run)
    .where(dag_run.c.id == bindparam("b_run_pk"), dag_run.c.state == RunState.RUNNING.value)
    .values(state=bindparam("b_state"), end_date=bindparam("b_now"))
)
_WAITING_TASK = and_(
    ti.c.run_pk == bindparam("b_run_pk"),
    ti.c.task_id == bindparam("b_task_id"),
    ti.c.state == TaskState.NONE.value,
)
_QUEUE_TASK = (
    update(ti).where(_WAITING_TASK).values(state=bindparam("b_state"), queued_at=bindparam("b_now"))
)
_END_TASK = (
    update(ti).where(_WAITING_TASK).values(state=bindparam("b_state"), end_date=bindparam("b_now"))
)


def _needs_past(spec: DagSpec, states: dict[str, TaskState]) -> bool:
    return any(t.depends_on_past and states.get(t.task_id) == TaskState.NONE for t in spec.tasks)


def _past_ok(conn: Connection, spec: DagSpec, run_pk: int) -> dict[str, bool]:
    """For depends_on_past: did the previous run's instance of each task succeed or skip?"""
    logical_date = select(dag_run.c.logical_date).where(dag_run.c.id == run_pk).scalar_subquery()
    previous = conn.execute(
        select(dag_run.c.id)
        .where(dag_run.c.dag_id == spec.dag_id, dag_run.c.logical_date < logical_date)
        .order_by(dag_run.c.logical_date.desc())
        .limit(1)
    ).scalar()
    if previous is None:
        return {}
    ok = {TaskState.SUCCESS.value, TaskState.SKIPPED.value}
    return {
        task_id: state in ok
        for task_id, state in conn.execute(
            select(ti.c.task_id, ti.c.state).where(ti.c.run_pk == previous)
        )
    }


# ---------------------------------------------------------------- tasks: claim, lease, complete


@dataclass(frozen=True)
class Claim:
    """A task instance this worker now holds, with what the attempt needs to run."""

    ti_id: int
    run_pk: int
    dag_id: str
    task_id: str
    try_number: int
    fence_token: int
    run_id: str
    logical_date: datetime
    data_interval_start: datetime
    data_interval_end: datetime
    conf: dict = field(default_factory=dict)


def claim(
    conn: Connection,
    caps: Capabilities,
    owner: str,
    limit: int,
    lease_seconds: float,
    now: datetime,
    known_runs: dict[int, Any] | None = None,
) -> list[Claim]:
    """Take up to ``limit`` queued task instances: running, leased to ``owner``, fence + 1.

    Tasks without a pool first; then, for each pool with queued tasks, as many as its free
    slots allow, counted under the pool row's lock so two workers never overfill a pool.
    ``known_runs`` (run pk -> row) is the caller's cache of what a run's attempts need: that
    never changes after the run is created, so each run is read once per worker.
    """
    if limit <= 0:
        return []
    params = {
        "b_owner": owner,
        "b_until": now + timedelta(seconds=lease_seconds),
        "b_now": now,
    }
    free_pool = _CLAIM_UNPOOLED_SKIP_LOCKED if caps.skip_locked else _CLAIM_UNPOOLED
    rows = compiled.rows(conn, free_pool, {**params, "b_limit": limit})
    if len(rows) < limit:
        rows += _claim_pooled(conn, caps, limit - len(rows), params)
    if not rows:
        return []
    compiled.execute_many(
        conn,
        _INSERT_ATTEMPT,
        [
            {
                "b_ti_id": r.id,
                "b_run_pk": r.run_pk,
                "b_dag_id": r.dag_id,
                "b_task_id": r.task_id,
                "b_try": r.try_number,
                "b_fence": r.fence_token,
                "b_owner": owner,
                "b_now": now,
            }
            for r in rows
        ],
    )
    runs = _run_facts(conn, {r.run_pk for r in rows}, {} if known_runs is None else known_runs)
    return [_claim_from(r, runs[r.run_pk]) for r in sorted(rows, key=lambda r: r.id)]


def _run_facts(conn: Connection, run_pks: set[int], known: dict[int, Any]) -> dict[int, Any]:
    """The claimed runs' ids, dates and conf: from ``known``, reading the others."""
    if len(known) > 10_000:  # a long-lived worker keeps only recent runs
        known.clear()
    missing = sorted(run_pks - known.keys())
    if missing:
        known.update((r.id, r) for r in compiled.rows(conn, _CLAIMED_RUNS, {"b_run_pks": missing}))
    return known


def _claim_pooled(conn: Connection, caps: Capabilities, room: int, params: dict) -> list:
    """Claim queued tasks of pools with free slots. A pool that does not exist holds its
    tasks back (see ``pools_missing``) rather than letting them run unlimited."""
    rows: list = []
    for (name,) in compiled.rows(conn, _QUEUED_POOLS):
        slots = conn.execute(_LOCK_POOL, {"b_pool": name}).scalar()
        if slots is None:
            continue
        free = slots - conn.execute(_RUNNING_IN_POOL, {"b_pool": name}).scalar_one()
        take = min(free, room - len(rows))
        if take > 0:
            statement = _CLAIM_POOL_SKIP_LOCKED if caps.skip_locked else _CLAIM_POOL
            rows += conn.execute(statement, {**params, "b_limit": take, "b_pool": name}).all()
        if len(rows) >= room:
            break
    return rows


def pools_missing(conn: Connection) -> list[str]:
    """Pools that queued tasks name but nobody created (``dagrun pools set``)."""
    return sorted(
        conn.execute(
            select(ti.c.pool)
            .where(in_state(TaskState.QUEUED), ti.c.pool.is_not(None))
            .where(ti.c.pool.not_in(select(pool.c.name)))
            .distinct()
        ).scalars()
    )


def _claim_from(row: Any, run: Any) -> Claim:
    return Claim(
        ti_id=row.id,
        run_pk=row.run_pk,
        dag_id=row.dag_id,
        task_id=row.task_id,
        try_number=row.try_number,
        fence_token=row.fence_token,
        run_id=run.run_id,
        logical_date=run.logical_date,
        data_interval_start=run.data_interval_start,
        data_interval_end=run.data_interval_end,
        conf=json.loads(run.conf) if run.conf else {},
    )


def _claim_statement(skip_locked: bool, pooled: bool):
    """UPDATE ... FROM a CTE that picks the rows, so the LIMIT holds: PostgreSQL may re-run an
    ``IN (SELECT ... LIMIT n FOR UPDATE SKIP LOCKED)`` subquery and claim more than n rows."""
    in_pool = ti.c.pool == bindparam("b_pool") if pooled else ti.c.pool.is_(None)
    pick = (
        select(ti.c.id)
        .where(in_state(TaskState.QUEUED), in_pool)
        .order_by(ti.c.priority_weight.desc(), ti.c.id)
        .limit(bindparam("b_limit"))
    )
    if skip_locked:
        pick = pick.with_for_update(skip_locked=True)
    picked = pick.cte("picked")
    return (
        update(ti)
        .where(ti.c.id == picked.c.id, ti.c.state == TaskState.QUEUED.value)
        .values(
            state=TaskState.RUNNING.value,
            try_number=ti.c.try_number + 1,
            fence_token=ti.c.fence_token + 1,
            lease_owner=bindparam("b_owner"),
            lease_until=bindparam("b_until"),
            start_date=bindparam("b_now"),
            end_date=None,
            duration=None,
        )
        .returning(
            ti.c.id, ti.c.run_pk, ti.c.dag_id, ti.c.task_id, ti.c.try_number, ti.c.fence_token
        )
    )


_CLAIM_UNPOOLED = _claim_statement(skip_locked=False, pooled=False)
_CLAIM_UNPOOLED_SKIP_LOCKED = _claim_statement(skip_locked=True, pooled=False)
_CLAIM_POOL = _claim_statement(skip_locked=False, pooled=True)
_CLAIM_POOL_SKIP_LOCKED = _claim_statement(skip_locked=True, pooled=True)
_QUEUED_POOLS = (
    select(ti.c.pool)
    .where(in_state(TaskState.QUEUED), ti.c.pool.is_not(None))
    .distinct()
    .order_by(ti.c.pool)
)
_LOCK_POOL = select(pool.c.slots).where(pool.c.name == bindparam("b_pool")).with_for_update()
_RUNNING_IN_POOL = (
    select(func.count())
    .select_from(ti)
    .where(ti.c.pool == bindparam("b_pool"), in_state(TaskState.RUNNING))
)
_INSERT_ATTEMPT = insert(task_attempt).values(
    ti_id=bindparam("b_ti_id"),
    run_pk=bindparam("b_run_pk"),
    dag_id=bindparam("b_dag_id"),
    task_id=bindparam("b_task_id"),
    try_number=bindparam("b_try"),
    fence_token=bindparam("b_fence"),
    worker=bindparam("b_owner"),
    started_at=bindparam("b_now"),
)
_CLAIMED_RUNS = select(
    dag_run.c.id,
    dag_run.c.run_id,
    dag_run.c.logical_date,
    dag_run.c.data_interval_start,
    dag_run.c.data_interval_end,
    dag_run.c.conf,
).where(dag_run.c.id.in_(bindparam("b_run_pks", expanding=True)))


def upstream_values(conn: Connection, run_pk: int, task_ids: Iterable[str]) -> dict[str, Any]:
    """The return values of upstream tasks in the same run (TaskFlow data passing)."""
    task_ids = list(task_ids)
    if not task_ids:
        return {}
    rows = conn.execute(
        select(ti.c.task_id, ti.c.return_value).where(
            ti.c.run_pk == run_pk, ti.c.task_id.in_(task_ids)
        )
    )
    return {task_id: json.loads(value) if value else None for task_id, value in rows}


def extend_leases(
    conn: Connection,
    owner: str,
    leases: Iterable[tuple[int, int]],
    lease_seconds: float,
    now: datetime,
) -> set[tuple[int, int]]:
    """Heartbeat: push out the leases still held; returns the (ti_id, fence) pairs lost."""
    leases = set(leases)
    if not leases:
        return set()
    kept = conn.execute(
        update(ti)
        .where(
            tuple_(ti.c.id, ti.c.fence_token).in_(sorted(leases)),
            ti.c.lease_owner == owner,
            ti.c.state == TaskState.RUNNING.value,
        )
        .values(lease_until=now + timedelta(seconds=lease_seconds))
        .returning(ti.c.id, ti.c.fence_token)
    ).all()
    return leases - {(r.id, r.fence_token) for r in kept}


@dataclass(frozen=True)
class Outcome:
    """How one attempt ended, as reported by the worker that ran it."""

    ti_id: int
    run_pk: int
    dag_id: str
    task_id: str
    fence_token: int
    outcome: AttemptOutcome
    error: str | None = None
    return_value: str | None = None
    duration: float = 0.0
    log: LogRange | None = None


@dataclass
class Completion:
    """What ``complete`` did: accepted outcomes, stale ones, and the runs it advanced."""

    accepted: list[Outcome] = field(default_factory=list)
    stale: list[Outcome] = field(default_factory=list)
    retrying: list[Outcome] = field(default_factory=list)
    dead: list[Outcome] = field(default_factory=list)
    finished_runs: list[int] = field(default_factory=list)


def complete(
    conn: Connection,
    owner: str,
    outcomes: Iterable[Outcome],
    spec_for: SpecLookup,
    now: datetime,
) -> Completion:
    """Record finished attempts (fenced), schedule retries, and advance their runs.

    Many outcomes share one transaction (a group commit); successes are written with one
    batched statement. An outcome whose lease was lost changes no task state: it is recorded
    as stale in the attempt history and discarded.
    """
    outcomes = list(outcomes)
    states = _succeed(
        conn, owner, [o for o in outcomes if o.outcome == AttemptOutcome.SUCCESS], now
    )
    for o in outcomes:
        if o.outcome != AttemptOutcome.SUCCESS:
            states[o.ti_id] = _fail(conn, owner, o, spec_for(o.dag_id).task_map.get(o.task_id), now)
    result = Completion()
    touched: dict[int, str] = {}
    for o in outcomes:
        state = states[o.ti_id]
        if state is None:
            result.stale.append(o)
            continue
        result.accepted.append(o)
        if state == TaskState.UP_FOR_RETRY:
            result.retrying.append(o)
            continue
        if state == TaskState.FAILED:
            result.dead.append(o)
        touched[o.run_pk] = o.dag_id
    _record_attempts(conn, outcomes, {o.ti_id for o in result.stale}, now)
    touched.update(_next_runs_waiting_on_past(conn, result.accepted, spec_for))
    decided = advance_runs(conn, {pk: spec_for(d) for pk, d in touched.items()}, now)
    result.finished_runs = [pk for pk, d in decided.items() if d.run_state is not None]
    return result


def _next_runs_waiting_on_past(
    conn: Connection, finished: list[Outcome], spec_for: SpecLookup
) -> list[tuple[int, str]]:
    """The next runs (by logical date) of runs where a ``depends_on_past`` task just ended:
    their instance of that task may be ready now, and nothing else would look at them."""
    found = set()
    for o in finished:
        task = spec_for(o.dag_id).task_map.get(o.task_id)
        if task is not None and task.depends_on_past:
            after = select(dag_run.c.logical_date).where(dag_run.c.id == o.run_pk).scalar_subquery()
            nxt = conn.execute(
                select(dag_run.c.id)
                .where(dag_run.c.dag_id == o.dag_id, dag_run.c.logical_date > after)
                .order_by(dag_run.c.logical_date)
                .limit(1)
            ).scalar()
            if nxt is not None:
                found.add((nxt, o.dag_id))
    return sorted(found)


def _succeed(
    conn: Connection, owner: str, outcomes: list[Outcome], now: datetime
) -> dict[int, TaskState | None]:
    """One batched guarded update for all successes; the rows it missed lost their lease."""
    if not outcomes:
        return {}
    done = compiled.execute_many(
        conn,
        _SUCCEED,
        [
            {
                "b_ti_id": o.ti_id,
                "b_fence": o.fence_token,
                "b_owner": owner,
                "b_now": now,
                "b_duration": o.duration,
                "b_value": o.return_value,
            }
            for o in outcomes
        ],
    )
    if done == len(outcomes):
        return dict.fromkeys((o.ti_id for o in outcomes), TaskState.SUCCESS)
    rows = conn.execute(_HOLDERS, {"b_ti_ids": [o.ti_id for o in outcomes]})
    ours = {(r.id, r.fence_token) for r in rows if r.state == TaskState.SUCCESS.value}
    return {
        o.ti_id: TaskState.SUCCESS if (o.ti_id, o.fence_token) in ours else None for o in outcomes
    }


_HOLDERS = select(ti.c.id, ti.c.fence_token, ti.c.state).where(
    ti.c.id.in_(bindparam("b_ti_ids", expanding=True))
)


def _stale_reason(outcome: Outcome) -> str:
    return (
        f"finished as {outcome.outcome.value} after its lease was lost "
        f"(fence token {outcome.fence_token}); result discarded"
    )


def _fail(
    conn: Connection, owner: str, outcome: Outcome, task: TaskSpec | None, now: datetime
) -> TaskState | None:
    """The guarded update of a failed attempt: a retry later, or failed for good."""
    failures = conn.execute(
        _FAIL,
        {
            "b_ti_id": outcome.ti_id,
            "b_fence": outcome.fence_token,
            "b_owner": owner,
            "b_now": now,
            "b_duration": outcome.duration,
            "b_error": outcome.error,
        },
    ).scalar()
    if failures is None:
        return None
    retries = task.retries if task else 0
    if outcome.outcome == AttemptOutcome.NON_RETRYABLE or failures > retries:
        return TaskState.FAILED
    delay = backoff_delay(
        failures, task.retry_delay, task.max_retry_delay, task.retry_exponential_backoff
    )
    conn.execute(
        update(ti)
        .where(ti.c.id == outcome.ti_id)
        .values(state=TaskState.UP_FOR_RETRY.value, next_try_at=now + timedelta(seconds=delay))
    )
    return TaskState.UP_FOR_RETRY


_HELD = and_(
    ti.c.id == bindparam("b_ti_id"),
    ti.c.fence_token == bindparam("b_fence"),
    ti.c.lease_owner == bindparam("b_owner"),
    ti.c.state == TaskState.RUNNING.value,
)
_RELEASED = {"lease_owner": None, "lease_until": None, "end_date": bindparam("b_now")}
_SUCCEED = (
    update(ti)
    .where(_HELD)
    .values(
        state=TaskState.SUCCESS.value,
        duration=bindparam("b_duration"),
        return_value=bindparam("b_value"),
        last_error=None,
        **_RELEASED,
    )
)
_FAIL = (
    update(ti)
    .where(_HELD)
    .values(
        state=TaskState.FAILED.value,
        failures=ti.c.failures + 1,
        duration=bindparam("b_duration"),
        last_error=bindparam("b_error"),
        **_RELEASED,
    )
    .returning(ti.c.failures)
)


def _record_attempts(
    conn: Connection, outcomes: list[Outcome], stale: set[int], now: datetime
) -> None:
    """Give every attempt its one outcome; a stale one keeps why it was discarded."""
    if not outcomes:
        return
    compiled.execute_many(
        conn,
        _END_ATTEMPT,
        [
            {
                "b_ti_id": o.ti_id,
                "b_fence": o.fence_token,
                "b_outcome": (AttemptOutcome.STALE if o.ti_id in stale else o.outcome).value,
                "b_error": _stale_reason(o) if o.ti_id in stale else o.error,
                "b_now": now,
                "b_log": o.log.path if o.log else None,
                "b_log_offset": o.log.offset if o.log else None,
                "b_log_length": o.log.length if o.log else None,
            }
            for o in outcomes
        ],
    )


_END_ATTEMPT = (
    update(task_attempt)
    .where(
        task_attempt.c.ti_id == bindparam("b_ti_id"),
        task_attempt.c.fence_token == bindparam("b_fence"),
    )
    .values(
        outcome=bindparam("b_outcome"),
        error=bindparam("b_error"),
        ended_at=bindparam("b_now"),
        log_path=func.coalesce(bindparam("b_log"), task_attempt.c.log_path),
        log_offset=func.coalesce(bindparam("b_log_offset"), task_attempt.c.log_offset),
        log_length=func.coalesce(bindparam("b_log_length"), task_attempt.c.log_length),
    )
)


def release(
    conn: Connection, owner: str, leases: Iterable[tuple[int, int]], now: datetime, reason: str
) -> int:
    """Give held task instances back to the queue at once (graceful shutdown)."""
    count = 0
    for ti_id, fence in leases:
        done = conn.execute(
            update(ti)
            .where(
                ti.c.id == ti_id,
                ti.c.fence_token == fence,
                ti.c.lease_owner == owner,
                ti.c.state == TaskState.RUNNING.value,
            )
            .values(state=TaskState.QUEUED.value, lease_owner=None, lease_until=None, queued_at=now)
        )
        if done.rowcount:
            count += 1
            conn.execute(
                update(task_attempt)
                .where(task_attempt.c.ti_id == ti_id, task_attempt.c.fence_token == fence)
                .values(outcome=AttemptOutcome.RELEASED.value, error=reason, ended_at=now)
            )
    if count:
        announce_work(conn)
    return count


# ---------------------------------------------------------------- scheduler sweeps


def lease_owners(conn: Connection) -> set[str]:
    """The workers holding leases now."""
    return set(
        conn.execute(
            select(ti.c.lease_owner).where(in_state(TaskState.RUNNING)).distinct()
        ).scalars()
    )


def requeue_retries(conn: Connection, now: datetime) -> int:
    """Task instances whose retry time has come go back to the queue."""
    count = conn.execute(
        update(ti)
        .where(in_state(TaskState.UP_FOR_RETRY), ti.c.next_try_at <= now)
        .values(state=TaskState.QUEUED.value, queued_at=now, next_try_at=None)
    ).rowcount
    if count:
        announce_work(conn)
    return count


@dataclass(frozen=True)
class Reaped:
    ti_id: int
    run_pk: int
    dag_id: str
    task_id: str
    fence_token: int
    failed: bool


def reap_expired(
    conn: Connection,
    caps: Capabilities,
    spec_for: SpecLookup,
    now: datetime,
    budget: int = DEFAULT_LEASE_LOSS_BUDGET,
    dead_owners: Iterable[str] = (),
) -> list[Reaped]:
    """Expired leases become a new attempt at once, or a failure past the lease-loss budget.

    Lost leases are infrastructure failures (a killed or paused worker), so they have their
    own budget and leave the task's ``retries`` for its own errors. Leases of ``dead_owners``
    (workers known to be gone, see ``lease_owners``) count as expired already.
    """
    expired = ti.c.lease_until < now
    if dead_owners:
        expired = expired | ti.c.lease_owner.in_(list(dead_owners))
    pick = select(
        ti.c.id, ti.c.run_pk, ti.c.dag_id, ti.c.task_id, ti.c.fence_token, ti.c.lease_losses
    ).where(in_state(TaskState.RUNNING), expired)
    if caps.skip_locked:
        pick = pick.with_for_update(skip_locked=True)
    reaped = []
    for row in conn.execute(pick).all():
        failed = row.lease_losses + 1 > budget
        error = f"lease expired {row.lease_losses + 1} time(s): the worker died or stalled"
        done = conn.execute(
            update(ti)
            .where(
                ti.c.id == row.id,
                ti.c.fence_token == row.fence_token,
                ti.c.state == TaskState.RUNNING.value,
            )
            .values(
                state=(TaskState.FAILED if failed else TaskState.QUEUED).value,
                lease_losses=ti.c.lease_losses + 1,
                lease_owner=None,
                lease_until=None,
                queued_at=now,
                end_date=now if failed else None,
                last_error=error if failed else ti.c.last_error,
            )
        )
        if not done.rowcount:
            continue
        conn.execute(
            update(task_attempt)
            .where(task_attempt.c.ti_id == row.id, task_attempt.c.fence_token == row.fence_token)
            .values(outcome=AttemptOutcome.LEASE_EXPIRED.value, error=error, ended_at=now)
        )
        reaped.append(Reaped(row.id, row.run_pk, row.dag_id, row.task_id, row.fence_token, failed))
    if any(not r.failed for r in reaped):
        announce_work(conn)
    advance_runs(conn, {r.run_pk: spec_for(r.dag_id) for r in reaped if r.failed}, now)
    return reaped


# ---------------------------------------------------------------- operators: clear and rerun


def clear_runs(
    conn: Connection,
    spec: DagSpec,
    selection: dict[int, set[str] | None],
    now: datetime,
) -> tuple[int, int]:
    """Reset the chosen task instances of each run (all of them for None) so they run again.

    Running instances are left alone (they finish or are reaped first). A finished run goes
    back to waiting for a slot; an active one re-evaluates at once. Returns (runs, tasks).
    """
    cleared_tasks = 0
    for run_pk, task_ids in sorted(selection.items()):
        ensure_task_instances(conn, spec, [run_pk])
        where = [ti.c.run_pk == run_pk, ti.c.state != TaskState.RUNNING.value]
        if task_ids is not None:
            where.append(ti.c.task_id.in_(sorted(task_ids)))
        cleared_tasks += conn.execute(
            update(ti)
            .where(*where)
            .values(
                state=TaskState.NONE.value,
                failures=0,
                lease_losses=0,
                next_try_at=None,
                queued_at=None,
                end_date=None,
                last_error=None,
                return_value=None,
            )
        ).rowcount
        conn.execute(
            update(dag_run)
            .where(
                dag_run.c.id == run_pk,
                dag_run.c.state.in_([RunState.SUCCESS.value, RunState.FAILED.value]),
            )
            .values(state=RunState.WAITING.value, end_date=None)
        )
        advance_run(conn, run_pk, spec, now)
    return len(selection), cleared_tasks


# ---------------------------------------------------------------- partitions: fenced writes


def check_lease(conn: Connection, ti_id: int, fence_token: int, now: datetime) -> None:
    """Lock the task instance and raise ``LeaseLost`` unless this attempt still holds it:
    its fence, and a lease that has not run out (an attempt paused past its lease has lost
    the task even before the reaper hands it on)."""
    row = conn.execute(
        select(ti.c.id)
        .where(
            ti.c.id == ti_id,
            ti.c.fence_token == fence_token,
            ti.c.state == TaskState.RUNNING.value,
            ti.c.lease_until > now,
        )
        .with_for_update()
    ).first()
    if row is None:
        raise LeaseLost(ti_id, fence_token)


def record_partition_write(conn: Connection, **values: Any) -> None:
    conn.execute(insert(partition_write).values(**values))


def run_pk_of(conn: Connection, ti_id: int) -> int:
    """The run a task instance belongs to (a partition write records it)."""
    return conn.execute(select(ti.c.run_pk).where(ti.c.id == ti_id)).scalar_one()

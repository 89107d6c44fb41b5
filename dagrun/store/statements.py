"""The catalogue: every statement that creates, admits, starts, claims, leases, completes,
reaps or clears runs, task instances and callback events, and the locks they take, each
named with one line on what it does.

This module is the concurrency story of dagrun, read top to bottom. A DAG's runs are
created and admitted under its row lock, and started; a run's tasks are queued (or given up
on) under the run locks, and the run ends when they have; workers claim queued tasks, within
the pools' and DAGs' limits counted under those rows' locks, hold them by lease and end each
attempt with one fenced outcome; a sensor gives its lease back between pokes; upkeep
requeues what is due and reaps what lost its worker; the callback outbox's events are
claimed and leased the same way, and ended, never run twice; operators clear, mark and
cancel. Its
rules:

* A transition is a guarded UPDATE that names the state it expects and, for work a worker
  holds, the lease owner and fence token (``HELD``); the caller checks the rows changed.
  Zero means someone moved the row first: a lost lease, a cleared task, another scheduler.
* An attempt's outcome is written once (``END_ATTEMPT`` only fills an empty outcome); a
  result that arrives after someone else ended the attempt is kept beside it
  (``NOTE_LATE_RESULT``), never over it.
* Per-DAG decisions (creating and admitting runs) hold the DAG row lock (``LOCK_DAG``),
  per-run decisions (which tasks are ready, whether the run is over) hold the run rows
  (``LOCK_RUNS``), always in id order so two lockers never deadlock on PostgreSQL. SQLite
  ignores ``FOR UPDATE``: there every write transaction is ``BEGIN IMMEDIATE``, one writer.
* Claims pick rows ``FOR UPDATE SKIP LOCKED`` inside the claiming UPDATE's CTE, so many
  workers take disjoint rows and the LIMIT holds (PostgreSQL may re-run an ``IN (SELECT ...
  LIMIT n)`` subquery and claim more than n rows).
* Bind parameters are named ``b_*``: SQLAlchemy reserves a column's own name in a SET clause.

Nothing else is here. A decision locks first, then reads what it decides from with plain
reads, which lock nothing and live with the other reads in ``queries/``: ``run_reads``
(runs and their task states), ``task_reads`` (task instances, attempts, callbacks) and
``dag_reads`` (DAGs, pools and caps, asset events). The configuration rows' statements
(``registry``, ``pools``, ``variables``, ``connections``, ``audit``), the asset records'
(``assets``, ``asset_triggers``) and retention's deletes (``retention``) are there too.
The functions that combine this module's statements live beside it: ``runs`` (create,
admit, start, advance), ``attempts`` (claim, extend, complete, release), ``pools`` (claims
within the limits), ``upkeep`` (requeue, reap) and ``operator_actions`` (clear, mark,
cancel). They name these statements through ``catalogue.TRANSITIONS``, and all of them run
through ``sql``: a process imports this module only to render a statement.
"""

from __future__ import annotations

from sqlalchemy import Integer, and_, bindparam, func, insert, literal, select, text, update

from dagrun.states import CallbackState, RunState, TaskState
from dagrun.store.protocol import WORK_CHANNEL
from dagrun.store.schema import (
    callback,
    dag,
    dag_cap,
    dag_run,
    in_state,
    partition_write,
    pool,
    task_attempt,
)
from dagrun.store.schema import task_instance as ti
from dagrun.store.sql import Statement, binds, dialect_insert, insert_new, name_all
from dagrun.store.sql import bind as _b
from dagrun.store.sql import bind_list as _many

# ---------------------------------------------------------------- runs: create, admit, start

_DAG_ROW = select(dag.c.dag_id).where(dag.c.dag_id == _b("dag_id"))
LOCK_DAG = Statement(
    "Lock a DAG row: creating and admitting one DAG's runs happen under it.",
    _DAG_ROW.with_for_update(),
)
LOCK_DAG_OR_SKIP = Statement(
    "Lock a DAG row unless another scheduler holds it (then no row: pass the DAG over).",
    _DAG_ROW.with_for_update(skip_locked=True),
)
_RUN_COLUMNS = (
    "dag_id run_id logical_date data_interval_start data_interval_end run_type state conf "
    "not_before created_at"
)
INSERT_RUNS = Statement(
    "Create runs in state waiting; a date that has a run keeps it (one run per date).",
    insert_new(dag_run, tuple(_RUN_COLUMNS.split())),
)
INSERT_MANUAL_RUN = Statement(
    "Create one manual run in state waiting; returns its id.",
    insert(dag_run).values(binds(_RUN_COLUMNS)).returning(dag_run.c.id),
)
SET_CURSOR = Statement(
    "Move the scheduler's per-DAG cursor: the next logical date it will consider.",
    update(dag).where(dag.c.dag_id == _b("dag_id")).values(next_logical_date=_b("cursor")),
)
ADMIT_RUN = Statement(
    "waiting -> queued: the run takes a max_active_runs slot.",
    update(dag_run)
    .where(dag_run.c.id == _b("run_pk"), dag_run.c.state == RunState.WAITING.value)
    .values(state=RunState.QUEUED.value),
)
_TASK_INSTANCE_COLUMNS = tuple(
    ["run_pk", "dag_id", "task_id", "state", "max_tries", "priority_weight", "pool", "capped"]
)
#: A new task instance has tried nothing yet.
_NO_TRIES = dict.fromkeys(("try_number", "failures", "infra_failures", "fence_token"), 0)
INSERT_TASK_INSTANCES = Statement(
    "Create a run's missing task instances, or a mapped task's indexes, in state none "
    "(existing ones are left alone).",
    insert_new(ti, (*_TASK_INSTANCE_COLUMNS, "map_index"), **_NO_TRIES),
)


def _insert_missing_tasks(dialect: str):
    """INSERT of a task instance (map index -1) unless the run has one of that task already:
    a mapped task expanded into indexes 0..n-1 has no -1 row, and must not get one back."""
    columns = [*_TASK_INSTANCE_COLUMNS, "map_index"]
    values = [bindparam(f"b_{c}", type_=ti.c[c].type) for c in columns]
    known = select(ti.c.id).where(ti.c.run_pk == _b("run_pk"), ti.c.task_id == _b("task_id"))
    chosen = select(*values, *(literal(0) for _ in _NO_TRIES)).where(~known.exists())
    return (
        dialect_insert(dialect, ti)
        .from_select([*columns, *_NO_TRIES], chosen, include_defaults=False)
        .on_conflict_do_nothing()
    )


INSERT_MAPPED_TASK_INSTANCES = Statement(
    "INSERT_TASK_INSTANCES for mapped tasks: none while the task has instances of any index.",
    _insert_missing_tasks,
)
START_RUN = Statement(
    "queued -> running, stamped with its start.",
    update(dag_run)
    .where(dag_run.c.id == _b("run_pk"), dag_run.c.state == RunState.QUEUED.value)
    .values(state=RunState.RUNNING.value, start_date=_b("now"), end_date=None),
)

# ---------------------------------------------------------------- runs: readiness and end

LOCK_RUNS = Statement(
    "Lock runs in id order and read their states: readiness is decided under these locks.",
    select(dag_run.c.id, dag_run.c.state)
    .where(dag_run.c.id.in_(_many("run_pks")))
    .order_by(dag_run.c.id)
    .with_for_update(),
)
_WAITING_TASK = and_(
    ti.c.run_pk == _b("run_pk"), ti.c.task_id == _b("task_id"), ti.c.state == TaskState.NONE.value
)
QUEUE_TASK = Statement(
    "none -> queued: the task's trigger rule is met (a task that is not mapped: its map "
    "index, -1, completes the unique key, which SQLite updates in one pass).",
    update(ti)
    .where(_WAITING_TASK, ti.c.map_index == -1)
    .values(state=TaskState.QUEUED.value, queued_at=_b("now")),
)
END_WAITING_TASK = Statement(
    "none -> upstream_failed or skipped: its trigger rule can never be met.",
    update(ti).where(_WAITING_TASK).values(state=_b("state"), end_date=_b("now")),
)
FAIL_WAITING_TASK = Statement(
    "none -> failed with the reason: a mapped task whose upstream value cannot be mapped.",
    update(ti)
    .where(_WAITING_TASK)
    .values(state=TaskState.FAILED.value, end_date=_b("now"), last_error=_b("error")),
)
NUMBER_PLACEHOLDER = Statement(
    "A mapped task's unexpanded instance (map index -1) becomes its index 0.",
    update(ti)
    .where(ti.c.run_pk == _b("run_pk"), ti.c.task_id == _b("task_id"), ti.c.map_index == -1)
    .values(map_index=0),
)
_WAITING_INDEX = and_(_WAITING_TASK, ti.c.map_index < _b("length"))
QUEUE_INDEXES = Statement(
    "none -> queued for a mapped task's indexes below its length (all of them when it was "
    "just expanded; the cleared ones when it runs again).",
    update(ti).where(_WAITING_INDEX).values(state=TaskState.QUEUED.value, queued_at=_b("now")),
)
DROP_INDEXES = Statement(
    "none -> skipped for the indexes of a mapped task past its new length (its upstream "
    "returned a shorter list when it ran again).",
    update(ti)
    .where(_WAITING_TASK, ti.c.map_index >= _b("length"))
    .values(state=TaskState.SKIPPED.value, end_date=_b("now")),
)
END_RUN = Statement(
    "running -> success or failed: every task instance has finished.",
    update(dag_run)
    .where(dag_run.c.id == _b("run_pk"), dag_run.c.state == RunState.RUNNING.value)
    .values(state=_b("state"), end_date=_b("now")),
)
ANNOUNCE_WORK = Statement(
    "Tell listening workers, when this transaction commits, that tasks were queued.",
    text(f"NOTIFY {WORK_CHANNEL}"),
)

# ---------------------------------------------------------------- attempts: claim

LOCK_POOL = Statement(
    "Lock a pool row and read its slots: a pool's free slots are counted under it.",
    select(pool.c.slots).where(pool.c.name == _b("pool")).with_for_update(),
)
LOCK_DAG_CAP = Statement(
    "Lock a DAG's cap row and read its max_active_tasks: its running tasks are counted under "
    "it (a row only claims lock, so claiming never waits on the scheduler's DAG lock).",
    select(dag_cap.c.max_active_tasks).where(dag_cap.c.dag_id == _b("dag_id")).with_for_update(),
)


def _claim(pooled: bool, scoped: bool = False, capped: bool = False):
    """queued -> running for up to ``b_limit`` rows, highest priority first: leased to
    ``b_owner`` until ``b_until``, try + 1, fence + 1; ``scoped``: of the runs ``b_run_pks``
    only; ``capped``: of the DAG ``b_dag_id``'s capped task instances (else uncapped ones).
    Built when first rendered (``lambda _: _claim(...)``): building one costs about a
    millisecond, and a process uses few of the eight."""
    picked = _claimable(pooled, scoped, capped).with_for_update(skip_locked=True).cte("picked")
    return _claiming(ti.c.id == picked.c.id)


def _claimable(pooled: bool, scoped: bool = False, capped: bool = False):
    """The ids of the rows a claim takes (see ``_claim``)."""
    in_pool = ti.c.pool == _b("pool") if pooled else ti.c.pool.is_(None)
    in_cap = (
        and_(ti.c.capped.is_(True), ti.c.dag_id == _b("dag_id"))
        if capped
        else ti.c.capped.is_(False)
    )
    chosen = [in_state(TaskState.QUEUED), in_pool, in_cap]
    if scoped:
        chosen.append(ti.c.run_pk.in_(_many("run_pks")))
    order = (ti.c.priority_weight.desc(), ti.c.id)
    return select(ti.c.id).where(*chosen).order_by(*order).limit(_b("limit"))


def _claiming(picked):
    """queued -> running for the rows ``picked`` chooses (see ``_claim``)."""
    return (
        update(ti)
        .where(picked, ti.c.state == TaskState.QUEUED.value)
        .values(
            state=TaskState.RUNNING.value,
            try_number=ti.c.try_number + 1,
            fence_token=ti.c.fence_token + 1,
            lease_owner=_b("owner"),
            lease_until=_b("until"),
            start_date=_b("now"),
            end_date=None,
            duration=None,
        )
        .returning(
            *ti.c["id", "run_pk", "dag_id", "task_id", "try_number", "fence_token", "failures"],
            ti.c.infra_failures,
            ti.c.map_index,
            ti.c.first_poke_at,
        )
    )


CLAIM = Statement(
    "queued -> running for tasks outside pools: leased, try + 1, fence + 1, priority first.",
    lambda _: _claim(pooled=False),
)
CLAIM_IN_POOL = Statement(
    "queued -> running for one pool's tasks, as many as its free slots (see pools.py).",
    lambda _: _claim(pooled=True),
)
CLAIM_IN_RUNS = Statement(
    "CLAIM for the tasks of some runs only (`dagrun run` and backfill run their own runs).",
    lambda _: _claim(pooled=False, scoped=True),
)
CLAIM_IN_POOL_IN_RUNS = Statement(
    "CLAIM_IN_POOL for the tasks of some runs only.",
    lambda _: _claim(pooled=True, scoped=True),
)
CLAIM_CAPPED = Statement(
    "CLAIM for one DAG's capped tasks outside pools, within its max_active_tasks.",
    lambda _: _claim(pooled=False, capped=True),
)
CLAIM_CAPPED_IN_POOL = Statement(
    "CLAIM for one DAG's capped tasks of one pool, within both limits.",
    lambda _: _claim(pooled=True, capped=True),
)
CLAIM_CAPPED_IN_RUNS = Statement(
    "CLAIM_CAPPED for the tasks of some runs only.",
    lambda _: _claim(pooled=False, scoped=True, capped=True),
)
CLAIM_CAPPED_IN_POOL_IN_RUNS = Statement(
    "CLAIM_CAPPED_IN_POOL for the tasks of some runs only.",
    lambda _: _claim(pooled=True, scoped=True, capped=True),
)
INSERT_ATTEMPT = Statement(
    "Open an attempt in the history: who runs which try under which fence, since when.",
    insert(task_attempt).values(
        binds("ti_id run_pk dag_id task_id try_number fence_token worker started_at")
    ),
)
# With one writer at a time (SQLite), a claim in two steps costs a fifth of CLAIM for a few
# rows: nothing can take the rows picked before the same transaction claims them.
PICK_QUEUED = Statement(
    "The ids CLAIM would take, for CLAIM_PICKED where no other writer runs meanwhile.",
    lambda _: _claimable(pooled=False),
)
PICK_QUEUED_IN_RUNS = Statement(
    "PICK_QUEUED for the tasks of some runs only.", lambda _: _claimable(False, scoped=True)
)
CLAIM_PICKED = Statement(
    "queued -> running for the ids PICK_QUEUED took (``b_ids``), as CLAIM does.",
    lambda _: _claiming(ti.c.id.in_(_many("ids"))),
)

# ---------------------------------------------------------------- attempts: lease and end

#: The row is still this attempt's: same fence, same owner, still running.
HELD = and_(
    ti.c.id == _b("ti_id"),
    ti.c.fence_token == _b("fence"),
    ti.c.lease_owner == _b("owner"),
    ti.c.state == TaskState.RUNNING.value,
)
_RELEASED = {"lease_owner": None, "lease_until": None, "end_date": _b("now")}
EXTEND_LEASES = Statement(
    "Heartbeat: push out the leases this owner still holds; returns the rows kept.",
    update(ti)
    .where(
        ti.c.id.in_(_many("ti_ids")),
        ti.c.lease_owner == _b("owner"),
        ti.c.state == TaskState.RUNNING.value,
    )
    .values(lease_until=_b("until"))
    .returning(ti.c.id, ti.c.fence_token),
)
COMPLETE_SUCCESS = Statement(
    "running -> success for an attempt that still holds its lease, with its return value.",
    update(ti)
    .where(HELD)
    .values(
        state=TaskState.SUCCESS.value,
        duration=_b("duration"),
        return_value=_b("value"),
        last_error=None,
        **_RELEASED,
    ),
)
COMPLETE_SKIP = Statement(
    "running -> skipped for an attempt that still holds its lease and whose task asked to "
    "be skipped, with its reason; never retried.",
    update(ti)
    .where(HELD)
    .values(
        state=TaskState.SKIPPED.value,
        duration=_b("duration"),
        return_value=None,
        last_error=_b("error"),
        **_RELEASED,
    ),
)
COMPLETE_FAILURE = Statement(
    "running -> up_for_retry or failed for an attempt that still holds its lease, with the "
    "counts of its failures and infrastructure failures and when to try again.",
    update(ti)
    .where(HELD)
    .values(
        state=_b("state"),
        failures=_b("failures"),
        infra_failures=_b("infra_failures"),
        next_try_at=_b("retry_at"),
        duration=_b("duration"),
        last_error=_b("error"),
        **_RELEASED,
    )
    .returning(ti.c.id),
)
_ATTEMPT = and_(task_attempt.c.ti_id == _b("ti_id"), task_attempt.c.fence_token == _b("fence"))
#: The attempt's log range (``b_log``, ``b_log_offset``, ``b_log_length``), unless unknown.
_LOG_RANGE = {
    "log_path": func.coalesce(_b("log"), task_attempt.c.log_path),
    "log_offset": func.coalesce(_b("log_offset"), task_attempt.c.log_offset),
    "log_length": func.coalesce(_b("log_length"), task_attempt.c.log_length),
}
END_ATTEMPT = Statement(
    "Give an attempt its one outcome, error, end and log range; an ended attempt keeps its own.",
    update(task_attempt)
    .where(_ATTEMPT, task_attempt.c.outcome.is_(None))
    .values(outcome=_b("outcome"), error=_b("error"), ended_at=_b("now"), **_LOG_RANGE),
)
NOTE_LATE_RESULT = Statement(
    "Keep what an attempt reported after it was ended for it (a reaped lease), beside its "
    "outcome; and its log range, which only the attempt knows.",
    update(task_attempt)
    .where(_ATTEMPT, task_attempt.c.outcome.is_not(None), task_attempt.c.late_result.is_(None))
    .values(late_result=_b("late"), **_LOG_RANGE),
)
RELEASE = Statement(
    "running -> queued for an attempt given back unstarted or stopped (worker shutdown).",
    update(ti)
    .where(HELD)
    .values(state=TaskState.QUEUED.value, lease_owner=None, lease_until=None, queued_at=_b("now")),
)
CHECK_LEASE = Statement(
    "Lock a task instance if this attempt still holds it and its lease has not run out.",
    select(ti.c.id)
    .where(
        ti.c.id == _b("ti_id"),
        ti.c.fence_token == _b("fence"),
        ti.c.state == TaskState.RUNNING.value,
        ti.c.lease_until > _b("now"),
    )
    .with_for_update(),
)
INSERT_PARTITION_WRITE = Statement(
    "Record a fenced partition write: file, rows, fingerprint, and the attempt that made it.",
    insert(partition_write).values(
        binds(
            "dataset partition_key path rows sha256 unchanged ti_id dag_id task_id run_pk "
            "try_number fence_token written_at"
        )
    ),
)

# ---------------------------------------------------------------- sensors: pokes

#: What a poke that ends its attempt records: one more poke, the first poke's start kept
#: (this poke's start, ``b_first_poke``, for the first), its duration; the lease let go.
_POKED = {
    "pokes": ti.c.pokes + 1,
    "first_poke_at": func.coalesce(ti.c.first_poke_at, _b("first_poke")),
    "duration": _b("duration"),
    **_RELEASED,
}
RESCHEDULE_POKE = Statement(
    "running -> up_for_reschedule for a sensor whose poke found its condition unmet and that "
    "still holds its lease: due again at ``b_poke_at``, holding no lease, its try given back "
    "(try_number - 1) so pokes never use up retries.",
    update(ti)
    .where(HELD)
    .values(
        state=TaskState.UP_FOR_RESCHEDULE.value,
        next_try_at=_b("poke_at"),
        try_number=ti.c.try_number - 1,
        **_POKED,
    ),
)
END_SENSOR = Statement(
    "running -> failed or skipped (soft_fail) for a sensor still holding its lease whose "
    "timeout has passed since its first poke, with the reason; never retried.",
    update(ti)
    .where(HELD)
    .values(state=_b("state"), next_try_at=None, last_error=_b("error"), **_POKED)
    .returning(ti.c.id),
)


# ---------------------------------------------------------------- upkeep: requeue, reap

REQUEUE_DUE_RETRIES = Statement(
    "up_for_retry -> queued for task instances whose retry time has come.",
    update(ti)
    .where(in_state(TaskState.UP_FOR_RETRY), ti.c.next_try_at <= _b("now"))
    .values(state=TaskState.QUEUED.value, queued_at=_b("now"), next_try_at=None),
)
REQUEUE_DUE_POKES = Statement(
    "up_for_reschedule -> queued for sensors whose next poke is due.",
    update(ti)
    .where(in_state(TaskState.UP_FOR_RESCHEDULE), ti.c.next_try_at <= _b("now"))
    .values(state=TaskState.QUEUED.value, queued_at=_b("now"), next_try_at=None),
)
LEASE_OWNERS = Statement(
    "The workers holding leases now: on running task instances or running callbacks.",
    select(ti.c.lease_owner)
    .where(in_state(TaskState.RUNNING))
    .union(select(callback.c.lease_owner).where(callback.c.state == CallbackState.RUNNING.value)),
)
EXPIRED_LEASES = Statement(
    "Running task instances whose lease ran out or whose owner is known gone (skip those "
    "another reaper holds).",
    select(
        *ti.c["id", "run_pk", "dag_id", "task_id", "fence_token", "infra_failures"],
        ti.c.try_number,
    )
    .where(
        in_state(TaskState.RUNNING),
        (ti.c.lease_until < _b("now")) | ti.c.lease_owner.in_(_many("gone")),
    )
    .with_for_update(skip_locked=True),
)
EXPIRE_LEASE = Statement(
    "running -> queued (a new attempt) or failed (infrastructure budget spent) for an "
    "expired lease, unless its attempt moved on first.",
    update(ti)
    .where(
        ti.c.id == _b("ti_id"),
        ti.c.fence_token == _b("fence"),
        ti.c.state == TaskState.RUNNING.value,
    )
    .values(
        state=_b("state"),
        infra_failures=ti.c.infra_failures + 1,
        lease_owner=None,
        lease_until=None,
        queued_at=_b("now"),
        end_date=_b("end"),
        last_error=func.coalesce(_b("error"), ti.c.last_error),
    ),
)

# ---------------------------------------------------------------- callbacks: the outbox

_PENDING = CallbackState.PENDING.value
_CALLING = CallbackState.RUNNING.value
INSERT_CALLBACK = Statement(
    "Write an event to the callback outbox (pending), in the transaction that decided it.",
    insert(callback).values(
        **binds("event dag_id run_pk ti_id task_id try_number fence_token error created_at"),
        state=_PENDING,
    ),
)


def _claim_callbacks(scoped: bool):
    """pending -> running for up to ``b_limit`` outbox rows, oldest first, leased to
    ``b_owner`` until ``b_until``; ``scoped``: of the runs ``b_run_pks`` only. Rows are
    picked in the CTE with SKIP LOCKED, as ``_claim``'s are, so the LIMIT holds."""
    chosen = [callback.c.state == _PENDING]
    if scoped:
        chosen.append(callback.c.run_pk.in_(_many("run_pks")))
    picked = (
        select(callback.c.id)
        .where(*chosen)
        .order_by(callback.c.id)
        .limit(_b("limit"))
        .with_for_update(skip_locked=True)
        .cte("picked")
    )
    return (
        update(callback)
        .where(callback.c.id == picked.c.id, callback.c.state == _PENDING)
        .values(state=_CALLING, lease_owner=_b("owner"), lease_until=_b("until"))
        .returning(
            *callback.c["id", "event", "dag_id", "run_pk", "ti_id", "task_id", "try_number"],
            *callback.c["fence_token", "error"],
        )
    )


CLAIM_CALLBACKS = Statement(
    "pending -> running for outbox rows: leased for their time limit and a margin, never "
    "extended (a callback whose worker is lost is ended, not run again).",
    lambda _: _claim_callbacks(scoped=False),
)
CLAIM_CALLBACKS_IN_RUNS = Statement(
    "CLAIM_CALLBACKS for the events of some runs only (`dagrun run` and backfill).",
    lambda _: _claim_callbacks(scoped=True),
)
_HELD_CALLBACK = and_(
    callback.c.id == _b("id"), callback.c.state == _CALLING, callback.c.lease_owner == _b("owner")
)
FINISH_CALLBACK = Statement(
    "running -> sent or failed for a callback this worker holds, with the reason and its log "
    "range; one that the sweep ended meanwhile (worker lost) keeps that end.",
    update(callback)
    .where(_HELD_CALLBACK)
    .values(
        state=_b("state"),
        lease_until=None,
        ended_at=_b("now"),
        outcome_error=_b("error"),
        log_path=_b("log"),
        log_offset=_b("log_offset"),
        log_length=_b("log_length"),
    ),
)
RELEASE_CALLBACK = Statement(
    "running -> pending for a callback given back before any child started it (shutdown).",
    update(callback)
    .where(_HELD_CALLBACK)
    .values(state=_PENDING, lease_owner=None, lease_until=None),
)
END_LOST_CALLBACKS = Statement(
    "running -> failed for callbacks whose lease ran out or whose worker is known gone: a "
    "callback fires at most once, so it is never run again; returns the rows ended.",
    update(callback)
    .where(
        callback.c.state == _CALLING,
        (callback.c.lease_until < _b("now")) | callback.c.lease_owner.in_(_many("gone")),
    )
    .values(
        state=CallbackState.FAILED.value,
        lease_until=None,
        ended_at=_b("now"),
        outcome_error=_b("error"),
    )
    .returning(callback.c.id, callback.c.event, callback.c.dag_id, callback.c.task_id),
)


# ---------------------------------------------------------------- operators: clear, mark, cancel


def _chosen_tasks(indexed: bool) -> list:
    """A run's task instances of the tasks ``b_task_ids`` (every index of a mapped task), or
    with ``indexed`` only the index ``b_map_index`` of the mapped ones among them (and the
    others whole): what an operator picked."""
    where = [ti.c.run_pk == _b("run_pk"), ti.c.task_id.in_(_many("task_ids"))]
    if indexed:
        where.append(ti.c.map_index.in_([_b("map_index"), -1]))
    return where


def _clear_tasks(indexed: bool):
    return (
        update(ti)
        .where(*_chosen_tasks(indexed), ti.c.state != TaskState.RUNNING.value)
        .values(
            state=TaskState.NONE.value,
            max_tries=ti.c.try_number + _b("tries", type_=Integer),
            failures=0,
            infra_failures=0,
            next_try_at=None,
            queued_at=None,
            end_date=None,
            last_error=None,
            return_value=None,
            first_poke_at=None,
            pokes=0,
        )
    )


CLEAR_TASKS = Statement(
    "Reset a run's chosen task instances (not running ones) to none so they run again (a "
    "sensor's timeout counts from its next first poke), its most tries now the tries made "
    "and ``b_tries`` more: try numbers count on across clears, as in Airflow.",
    _clear_tasks(indexed=False),
)
CLEAR_TASK_INDEX = Statement(
    "CLEAR_TASKS for one index of mapped tasks.", _clear_tasks(indexed=True)
)
REOPEN_RUN = Statement(
    "success or failed -> waiting: a cleared run waits for a slot again.",
    update(dag_run)
    .where(
        dag_run.c.id == _b("run_pk"),
        dag_run.c.state.in_([RunState.SUCCESS.value, RunState.FAILED.value]),
    )
    .values(state=RunState.WAITING.value, end_date=None),
)


def _stop_tasks(indexed: bool):
    return (
        update(ti)
        .where(*_chosen_tasks(indexed), ti.c.state == TaskState.RUNNING.value)
        .values(
            state=_b("state"),
            lease_owner=None,
            lease_until=None,
            end_date=_b("now"),
            last_error=_b("error"),
        )
        .returning(ti.c.id, ti.c.fence_token)
    )


STOP_TASKS = Statement(
    "running -> a state set by hand (cancel, mark): the lease is taken away, so the worker "
    "holding it stops the attempt and its late result is stale; returns the attempts ended.",
    _stop_tasks(indexed=False),
)
STOP_TASK_INDEX = Statement("STOP_TASKS for one index of mapped tasks.", _stop_tasks(indexed=True))


def _mark_tasks(indexed: bool):
    return (
        update(ti)
        .where(*_chosen_tasks(indexed), ti.c.state.in_(_many("from")))
        .values(
            state=_b("state"),
            next_try_at=None,
            start_date=None,
            end_date=_b("now"),
            duration=None,
            last_error=_b("error"),
        )
    )


MARK_TASKS = Statement(
    "A state set by hand on a run's chosen task instances that are not running (those are "
    "stopped first, STOP_TASKS), from the states ``b_from``, with the reason as its note. No "
    "try reached that state, so it has no start or duration (its tries keep theirs in the "
    "attempt history).",
    _mark_tasks(indexed=False),
)
MARK_TASK_INDEX = Statement("MARK_TASKS for one index of mapped tasks.", _mark_tasks(indexed=True))
REEVALUATE_TASKS = Statement(
    "upstream_failed or skipped -> none for tasks downstream of a mark whose state readiness "
    "decided, so the trigger rules decide them again. Readiness writes no note "
    "(END_WAITING_TASK, DROP_INDEXES); a state set by hand has its reason, a task that "
    "skipped itself its own: those stay until an operator changes them.",
    update(ti)
    .where(
        ti.c.run_pk == _b("run_pk"),
        ti.c.task_id.in_(_many("task_ids")),
        ti.c.state.in_([TaskState.UPSTREAM_FAILED.value, TaskState.SKIPPED.value]),
        ti.c.last_error.is_(None),
    )
    .values(state=TaskState.NONE.value, end_date=None),
)
SET_RUN_STATE = Statement(
    "A run's state set by hand (cancel, mark) or recomputed after a mark, with its end, "
    "from the state read under its lock (``b_was``).",
    update(dag_run)
    .where(dag_run.c.id == _b("run_pk"), dag_run.c.state == _b("was"))
    .values(state=_b("state"), end_date=_b("end")),
)


CATALOGUE = name_all(globals())

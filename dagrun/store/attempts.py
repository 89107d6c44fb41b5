"""Attempts through their life: claim -> run -> complete (success, retry, failed), with leases.

A claim is a short transaction committed before any task runs: the task instance becomes
``running``, leased to the worker until a deadline, with its try number and fence token
raised, and the attempt opens in the history. The worker extends its leases by heartbeat;
completion is a guarded update on owner and fence, so an attempt that lost its lease
changes nothing: its result is kept in the history as stale and discarded. Failures are
the task's own (counted against ``retries``) or the infrastructure's (an unwritable log, a
child lost before the attempt started: counted against the infrastructure budget that lost
leases also use). The statements are in ``statements.py``, the reads they decide from in
``task_reads``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from dagrun import settings
from dagrun.authoring.sensor_options import SensorSpec
from dagrun.errors import LeaseLost
from dagrun.parsing.spec import TaskSpec
from dagrun.states import AttemptOutcome, RunState, TaskState
from dagrun.store import assets, callbacks, pools, runs, sql, task_reads, xcoms
from dagrun.store.catalogue import TRANSITIONS as q
from dagrun.store.engine import capabilities
from dagrun.store.logfiles import LogRange
from dagrun.store.runs import SpecLookup
from dagrun.timing.backoff import backoff_delay

if TYPE_CHECKING:
    from sqlalchemy import Connection


#: Lost leases, lost children and unwritable logs a task instance may suffer before it
#: fails for good: infrastructure failures, kept apart from the task's own ``retries``.
DEFAULT_INFRA_BUDGET = 3
#: How long a claim holds its task instance unless extended (heartbeats every third).
DEFAULT_LEASE_SECONDS: float = settings.get("worker.lease_seconds")


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
    failures: int = 0
    infra_failures: int = 0
    map_index: int = -1
    #: A sensor's first poke, or this attempt's start when it never poked: its timeout
    #: counts from this.
    first_poke_at: datetime | None = None


def claim(
    conn: Connection,
    owner: str,
    limit: int,
    lease_seconds: float,
    now: datetime,
    known_runs: dict[int, Any] | None = None,
    run_pks: Iterable[int] | None = None,
) -> list[Claim]:
    """Take up to ``limit`` queued task instances: running, leased to ``owner``, fence + 1.

    Tasks without a pool or a DAG cap first; then, for each pool with queued tasks, as many
    as its free slots allow (``pools.claim_pooled``); then the tasks of DAGs with
    ``max_active_tasks`` within it (``pools.claim_capped``). ``known_runs`` (run pk -> row)
    is the caller's cache of what a run's attempts need: that never changes after the run is
    created, so each run is read once per worker. ``run_pks`` limits the claim to those
    runs' tasks (a driver runs its own runs only).
    """
    scoped = run_pks is not None
    run_pks = sorted(run_pks or ())
    if limit <= 0 or (scoped and not run_pks):
        return []
    params = {"b_owner": owner, "b_until": now + timedelta(seconds=lease_seconds), "b_now": now}
    if scoped:
        params["b_run_pks"] = run_pks
    rows = _claim_queued(conn, {**params, "b_limit": limit}, scoped)
    if len(rows) < limit:
        rows += pools.claim_pooled(conn, limit - len(rows), params, scoped=scoped)
    if len(rows) < limit:
        rows += pools.claim_capped(conn, limit - len(rows), params, scoped=scoped)
    if not rows:
        return []
    sql.execute_many(
        conn,
        q.INSERT_ATTEMPT,
        [
            {
                "b_ti_id": r.id,
                "b_run_pk": r.run_pk,
                "b_dag_id": r.dag_id,
                "b_task_id": r.task_id,
                "b_try_number": r.try_number,
                "b_fence_token": r.fence_token,
                "b_worker": owner,
                "b_started_at": now,
            }
            for r in rows
        ],
    )
    facts = runs.run_facts(conn, {r.run_pk for r in rows}, known_runs)
    return [_claim_from(r, facts[r.run_pk], now) for r in sorted(rows, key=lambda r: r.id)]


def _claim_queued(conn: Connection, params: dict[str, Any], scoped: bool) -> list:
    """Queued tasks outside pools and caps: by ``CLAIM`` where writers run at once, else
    picked first (see ``PICK_QUEUED``)."""
    if capabilities(conn.dialect.name).concurrent_writers:
        return sql.rows(conn, q.CLAIM_IN_RUNS if scoped else q.CLAIM, params)
    ids = sql.scalars(conn, q.PICK_QUEUED_IN_RUNS if scoped else q.PICK_QUEUED, params)
    picked = [{**params, "b_ids": chunk} for chunk in sql.chunks(ids)]
    return [row for each in picked for row in sql.rows(conn, q.CLAIM_PICKED, each)]


def _claim_from(row: Any, run: Any, now: datetime) -> Claim:
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
        failures=row.failures,
        infra_failures=row.infra_failures,
        map_index=row.map_index,
        first_poke_at=row.first_poke_at or now,
    )


def upstream_values(conn: Connection, run_pk: int, task_ids: Iterable[str]) -> dict[str, Any]:
    """The return values of upstream tasks in the same run (TaskFlow data passing); a
    mapped task's as a list in index order."""
    return runs.values_of(conn, run_pk, task_ids)


def stopped_by_hand(conn: Connection, leases: Iterable[tuple[int, int]]) -> set[tuple[int, int]]:
    """Which of these (ti_id, fence) attempts were ended by hand (cancel, mark): their
    worker stops them. Attempts whose lease expired are not among them; those run on, and
    their result is kept as late."""
    leases = set(leases)
    if not leases:
        return set()
    ti_ids = sorted({ti_id for ti_id, _ in leases})
    ended = sql.tuples(conn, task_reads.Q.STOPPED_ATTEMPTS, {"b_ti_ids": ti_ids})
    return leases & {(ti_id, fence) for ti_id, fence in ended}


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
    ti_ids = sorted({ti_id for ti_id, _ in leases})
    until = now + timedelta(seconds=lease_seconds)
    params = {"b_ti_ids": ti_ids, "b_owner": owner, "b_until": until}
    kept = sql.tuples(conn, q.EXTEND_LEASES, params)
    return leases - {(ti_id, fence) for ti_id, fence in kept}


# ---------------------------------------------------------------- complete


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
    failures: int = 0
    infra_failures: int = 0
    try_number: int = 0
    first_poke_at: datetime | None = None
    #: A sensor's last poke: its timeout has passed, so it ends failed or skipped, no retry.
    gave_up: bool = False
    map_index: int = -1
    #: What the attempt pushed besides its return value, key -> JSON (``store.xcoms``).
    xcoms: dict[str, str] | None = None

    @classmethod
    def of(cls, claim: Claim, outcome: AttemptOutcome, **result: Any) -> Outcome:
        return cls(
            ti_id=claim.ti_id,
            run_pk=claim.run_pk,
            dag_id=claim.dag_id,
            task_id=claim.task_id,
            fence_token=claim.fence_token,
            outcome=outcome,
            failures=claim.failures,
            infra_failures=claim.infra_failures,
            try_number=claim.try_number,
            first_poke_at=claim.first_poke_at,
            map_index=claim.map_index,
            **result,
        )


@dataclass
class Completion:
    """What ``complete`` did: accepted outcomes, stale ones, the runs it advanced, and how
    many callback events it wrote to the outbox."""

    accepted: list[Outcome] = field(default_factory=list)
    stale: list[Outcome] = field(default_factory=list)
    retrying: list[Outcome] = field(default_factory=list)
    dead: list[Outcome] = field(default_factory=list)
    #: Sensors whose poke found their condition unmet: they wait for the next one.
    rescheduled: list[Outcome] = field(default_factory=list)
    #: Tasks that asked to be skipped, and sensors that gave up with ``soft_fail``.
    skipped: list[Outcome] = field(default_factory=list)
    #: The runs this commit ended, and how they ended.
    finished_runs: dict[int, RunState] = field(default_factory=dict)
    callbacks: int = 0
    #: What this commit queued, as (run pk, task id) (``runs.queued_by``).
    queued: set[tuple[int, str]] | None = field(default_factory=set)


def complete(
    conn: Connection,
    owner: str,
    outcomes: Iterable[Outcome],
    spec_for: SpecLookup,
    now: datetime,
    infra_budget: int = DEFAULT_INFRA_BUDGET,
    *,
    announce: bool = True,
) -> Completion:
    """Record finished attempts (fenced), schedule retries and pokes, advance their runs.

    Many outcomes share one transaction (a group commit); successes, and sensors' pokes
    that found their condition unmet, are written with one batched statement each (a poke
    past the sensor's timeout since its first poke ends it instead, judged by the store's
    clock ``now``). An outcome whose lease was lost changes no task state: it is kept
    in the attempt history as stale and discarded. The events of accepted outcomes that a
    task has a callback for go to the outbox in the same transaction (``callbacks``), and a
    success of a task with outlets records its asset events (``assets``). What it queues
    is announced unless ``announce`` is False (``runs.advance_runs``)."""
    outcomes = [_judged(o, spec_for, now) for o in outcomes]
    states = _succeed(
        conn, owner, [o for o in outcomes if o.outcome == AttemptOutcome.SUCCESS], now
    )
    pokes = [o for o in outcomes if o.outcome == AttemptOutcome.RESCHEDULED]
    states.update(_reschedule(conn, owner, pokes, spec_for, now))
    skips = [o for o in outcomes if o.outcome == AttemptOutcome.SKIPPED]
    states.update(_skip(conn, owner, skips, now))
    for o in outcomes:
        if o.outcome not in _ENDED_IN_BATCH:
            task = spec_for(o.dag_id).task_map.get(o.task_id)
            if o.gave_up and task is not None and task.sensor is not None:
                states[o.ti_id] = _give_up(conn, owner, o, task.sensor, now)
            else:
                states[o.ti_id] = _fail(conn, owner, o, task, now, infra_budget)
    result = Completion()
    touched: dict[int, str] = {}
    ended: dict[int, set[str]] = {}
    for o in outcomes:
        state = states[o.ti_id]
        if state is None:
            result.stale.append(o)
            continue
        result.accepted.append(o)
        if state == TaskState.UP_FOR_RETRY:
            result.retrying.append(o)
            continue
        if state == TaskState.UP_FOR_RESCHEDULE:
            result.rescheduled.append(o)
            continue
        if state == TaskState.FAILED:
            result.dead.append(o)
        elif state == TaskState.SKIPPED:
            result.skipped.append(o)
        touched[o.run_pk] = o.dag_id
        ended.setdefault(o.run_pk, set()).add(o.task_id)
    _record_attempts(conn, outcomes, {o.ti_id for o in result.stale}, now)
    for run_pk, dag_id in _next_runs_waiting_on_past(conn, result.accepted, spec_for):
        touched[run_pk] = dag_id
        ended.pop(run_pk, None)  # its past changed, not its own tasks: decide all of it
    result.callbacks = callbacks.enqueue_task_events(
        conn, callbacks.task_events(result, spec_for), now
    )
    assets.record_events(conn, result.accepted, spec_for, now)
    xcoms.record_pushed(conn, result.accepted, now)
    specs = {pk: spec_for(d) for pk, d in touched.items()}
    decided = runs.advance_runs(conn, specs, now, ended, announce=announce)
    result.queued = runs.queued_by(decided, specs)
    result.finished_runs = {pk: d.run_state for pk, d in decided.items() if d.run_state}
    result.callbacks += sum(
        callbacks.hears_run_end(spec_for(touched[pk]), d.run_state)
        for pk, d in decided.items()
        if d.run_state is not None
    )
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
            nxt = runs.next_run(conn, o.dag_id, o.run_pk)
            if nxt is not None:
                found.add((nxt, o.dag_id))
    return sorted(found)


def _succeed(
    conn: Connection, owner: str, outcomes: list[Outcome], now: datetime
) -> dict[int, TaskState | None]:
    """One batched guarded update for all successes; the rows it missed lost their lease."""
    if not outcomes:
        return {}
    done = sql.execute_many(
        conn,
        q.COMPLETE_SUCCESS,
        [
            {
                **_held(o, owner, now),
                "b_duration": o.duration,
                "b_value": o.return_value,
            }
            for o in outcomes
        ],
    )
    return _landed(conn, outcomes, done, TaskState.SUCCESS)


#: The outcomes written with one batched statement each, not one by one.
_ENDED_IN_BATCH = frozenset(
    {AttemptOutcome.SUCCESS, AttemptOutcome.RESCHEDULED, AttemptOutcome.SKIPPED}
)


def _skip(
    conn: Connection, owner: str, outcomes: list[Outcome], now: datetime
) -> dict[int, TaskState | None]:
    """One batched guarded update for the attempts whose task asked to be skipped."""
    if not outcomes:
        return {}
    rows = [
        {
            **_held(o, owner, now),
            "b_duration": o.duration,
            "b_error": o.error,
        }
        for o in outcomes
    ]
    done = sql.execute_many(conn, q.COMPLETE_SKIP, rows)
    return _landed(conn, outcomes, done, TaskState.SKIPPED)


def _landed(
    conn: Connection, outcomes: list[Outcome], done: int, state: TaskState
) -> dict[int, TaskState | None]:
    """``state`` for the outcomes a batched guarded update changed (``done`` rows in all),
    None for those whose lease was lost: the rows not in ``state`` under their fence."""
    if done == len(outcomes):
        return dict.fromkeys((o.ti_id for o in outcomes), state)
    rows = sql.rows(conn, task_reads.Q.HOLDERS, {"b_ti_ids": [o.ti_id for o in outcomes]})
    ours = {(r.id, r.fence_token) for r in rows if r.state == state.value}
    return {o.ti_id: state if (o.ti_id, o.fence_token) in ours else None for o in outcomes}


def _judged(outcome: Outcome, spec_for: SpecLookup, now: datetime) -> Outcome:
    """A poke that found its condition unmet after the sensor's timeout has passed since
    its first poke is its last: recorded ``timed_out`` with the reason, and it ends the
    sensor (``gave_up``). A task that is no longer a sensor (its DAG changed) failed."""
    if outcome.outcome != AttemptOutcome.RESCHEDULED:
        return outcome
    task = spec_for(outcome.dag_id).task_map.get(outcome.task_id)
    if task is None or task.sensor is None:
        error = "its condition was unmet, and it is no longer a sensor"
        return replace(outcome, outcome=AttemptOutcome.FAILED, error=error)
    if not task.sensor.gave_up(outcome.first_poke_at, now):
        return outcome
    error = f"sensor timed out after {task.sensor.timeout:.10g} s"
    return replace(outcome, outcome=AttemptOutcome.TIMED_OUT, error=error, gave_up=True)


def _reschedule(
    conn: Connection, owner: str, pokes: list[Outcome], spec_for: SpecLookup, now: datetime
) -> dict[int, TaskState | None]:
    """One batched guarded update for the pokes that found their condition unmet: each
    sensor waits in up_for_reschedule (``SensorSpec.wait_after``), holding nothing, its try
    given back; the rows it missed lost their lease."""
    if not pokes:
        return {}
    rows = []
    for o in pokes:
        sensor = spec_for(o.dag_id).task_map[o.task_id].sensor
        assert sensor is not None  # only a sensor's poke is rescheduled
        first = o.first_poke_at or now  # the jitter of a growing wait is fixed by it
        key = f"{o.dag_id}#{o.task_id}#{o.map_index}#{first.isoformat()}"
        interval = sensor.wait_after((now - first).total_seconds(), key)
        rows.append(
            {
                **_held(o, owner, now),
                "b_duration": o.duration,
                "b_poke_at": now + timedelta(seconds=interval),
                "b_first_poke": first,
            }
        )
    done = sql.execute_many(conn, q.RESCHEDULE_POKE, rows)
    return _landed(conn, pokes, done, TaskState.UP_FOR_RESCHEDULE)


def _give_up(
    conn: Connection, owner: str, outcome: Outcome, sensor: SensorSpec, now: datetime
) -> TaskState | None:
    """The guarded update of a sensor's last poke: failed for good, or skipped with
    ``soft_fail``; None when the lease was lost."""
    state = TaskState.SKIPPED if sensor.soft_fail else TaskState.FAILED
    changed = sql.tuples(
        conn,
        q.END_SENSOR,
        {
            **_held(outcome, owner, now),
            "b_state": state.value,
            "b_error": outcome.error,
            "b_duration": outcome.duration,
            "b_first_poke": outcome.first_poke_at or now,
        },
    )
    return state if changed else None


def _fail(
    conn: Connection,
    owner: str,
    outcome: Outcome,
    task: TaskSpec | None,
    now: datetime,
    infra_budget: int,
) -> TaskState | None:
    """The guarded update of a failed attempt: a retry later, or failed for good. The new
    counts come from the claim's, which no one else can change while this attempt holds
    the task instance."""
    infra = outcome.outcome == AttemptOutcome.INFRA_FAILED
    failures = outcome.failures + (0 if infra else 1)
    infra_failures = outcome.infra_failures + (1 if infra else 0)
    if infra:
        final = infra_failures > infra_budget
    else:
        retries = task.retries if task else 0
        final = outcome.outcome == AttemptOutcome.NON_RETRYABLE or failures > retries
    retry_at = None
    if not final and task is not None:
        delay = backoff_delay(
            infra_failures if infra else failures,
            task.retry_delay,
            task.max_retry_delay,
            task.retry_exponential_backoff,
        )
        retry_at = now + timedelta(seconds=delay)
    state = TaskState.FAILED if final or task is None else TaskState.UP_FOR_RETRY
    changed = sql.tuples(
        conn,
        q.COMPLETE_FAILURE,
        {
            **_held(outcome, owner, now),
            "b_state": state.value,
            "b_failures": failures,
            "b_infra_failures": infra_failures,
            "b_retry_at": retry_at,
            "b_duration": outcome.duration,
            "b_error": outcome.error,
        },
    )
    return state if changed else None


def _record_attempts(
    conn: Connection, outcomes: list[Outcome], stale: set[int], now: datetime
) -> None:
    """Give every attempt its one outcome. A stale result whose attempt was already ended
    (a reaped lease) is kept beside that outcome instead of over it."""
    if not outcomes:
        return
    late = [o for o in outcomes if o.ti_id in stale]
    sql.execute_many(
        conn,
        q.NOTE_LATE_RESULT,
        [{**_attempt_key(o), **log_params(o.log), "b_late": _stale_reason(o)} for o in late],
    )
    sql.execute_many(
        conn,
        q.END_ATTEMPT,
        [
            {
                **_attempt_key(o),
                **log_params(o.log),
                "b_outcome": (AttemptOutcome.STALE if o.ti_id in stale else o.outcome).value,
                "b_error": _stale_reason(o) if o.ti_id in stale else o.error,
                "b_now": now,
            }
            for o in outcomes
        ],
    )


def _attempt_key(o: Outcome) -> dict[str, int]:
    return {"b_ti_id": o.ti_id, "b_fence": o.fence_token}


def _held(o: Outcome, owner: str, now: datetime) -> dict[str, Any]:
    """The parameters of ``statements.HELD`` (the attempt still holds its lease) and the
    instant every guarded end of an attempt writes."""
    return {"b_ti_id": o.ti_id, "b_fence": o.fence_token, "b_owner": owner, "b_now": now}


def log_params(log: LogRange | None) -> dict[str, Any]:
    """``END_ATTEMPT``'s log parameters: the attempt's range, or none (kept as they are)."""
    return {
        "b_log": log.path if log else None,
        "b_log_offset": log.offset if log else None,
        "b_log_length": log.length if log else None,
    }


def _stale_reason(outcome: Outcome) -> str:
    error = f": {outcome.error}" if outcome.error else ""
    return (
        f"finished as {outcome.outcome.value}{error} after its lease was lost "
        f"(fence token {outcome.fence_token}); result discarded"
    )


def release(
    conn: Connection, owner: str, leases: Iterable[tuple[int, int]], now: datetime, reason: str
) -> int:
    """Give held task instances back to the queue at once (graceful shutdown)."""
    count = 0
    for ti_id, fence in leases:
        key = {"b_ti_id": ti_id, "b_fence": fence}
        if sql.execute(conn, q.RELEASE, {**key, "b_owner": owner, "b_now": now}).rowcount:
            count += 1
            outcome = {"b_outcome": AttemptOutcome.RELEASED.value, "b_error": reason, "b_now": now}
            sql.execute(conn, q.END_ATTEMPT, {**key, **log_params(None), **outcome})
    if count:
        runs.announce_work(conn)
    return count


# ---------------------------------------------------------------- partitions: fenced writes


def check_lease(conn: Connection, ti_id: int, fence_token: int, now: datetime) -> None:
    """Lock the task instance and raise ``LeaseLost`` unless this attempt still holds it:
    its fence, and a lease that has not run out (an attempt paused past its lease has lost
    the task even before the reaper hands it on)."""
    params = {"b_ti_id": ti_id, "b_fence": fence_token, "b_now": now}
    if not sql.tuples(conn, q.CHECK_LEASE, params):
        raise LeaseLost(ti_id, fence_token)


def record_partition_write(conn: Connection, **values: Any) -> None:
    """Record a fenced partition write (see ``partitions``); ``values`` name the columns."""
    sql.execute(conn, q.INSERT_PARTITION_WRITE, {f"b_{k}": v for k, v in values.items()})


def run_pk_of(conn: Connection, ti_id: int) -> int:
    """The run a task instance belongs to (a partition write records it)."""
    return sql.scalar(conn, task_reads.Q.RUN_OF_TASK, {"b_ti_id": ti_id})

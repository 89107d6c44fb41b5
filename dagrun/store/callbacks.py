"""The callback outbox: events written where they are decided, run by workers at most once.

An event a callback must hear of (a task instance succeeded, will retry, failed for good; a
run ended) is a row of ``callback``, inserted by the transaction that decided it: the fenced
completion of the attempt holding the lease (``attempts.complete``), the guarded end of a
run (``runs``), the reaper failing a task whose infrastructure budget is spent (``upkeep``).
A stale result decides nothing, so it writes nothing; a run two deciders end at once is
ended, and written, by one of them. Only tasks and DAGs with a callback for the event get a
row: their spec says which, so nothing imports user code to know.

Workers claim pending rows in their group commit (pending -> running, leased for the time
limit and a margin), run them in a child (``callback_runner.execute_callback``) and record
``sent`` or ``failed``, with the reason and the log range, in a later commit. The lease is
never extended and a row never runs twice: one whose worker was lost is ended ``failed`` by
the sweep (``end_lost``), as a callback is better missed than sent twice. How a callback
ended changes no task or run state. Hand changes (``runs mark``, ``runs cancel``) write no events,
as in Airflow.

Its claims, leases and ends are in the catalogue (``statements``) with every other
statement that claims, leases or reaps; its reads are in ``task_reads``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from dagrun.parsing.spec import DagSpec
from dagrun.states import CallbackEvent, CallbackState, RunState
from dagrun.store import run_reads, sql, task_reads
from dagrun.store.catalogue import TRANSITIONS as q
from dagrun.store.logfiles import LogRange

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from dagrun.store.attempts import Completion
    from dagrun.store.runs import SpecLookup


# ---------------------------------------------------------------- events

#: The event a run's end is heard as.
RUN_EVENTS = {
    RunState.SUCCESS: CallbackEvent.RUN_SUCCESS,
    RunState.FAILED: CallbackEvent.RUN_FAILURE,
}
#: Why a running callback was ended by the sweep.
LOST = "worker lost: its lease ran out before it reported (not run again)"


@dataclass(frozen=True)
class TaskEvent:
    """A task instance's event, from the attempt (``ti_id``, ``fence_token``) that made it."""

    event: CallbackEvent
    ti_id: int
    run_pk: int
    dag_id: str
    task_id: str
    try_number: int
    fence_token: int
    error: str | None = None


def task_events(completion: Completion, spec_for: SpecLookup) -> list[TaskEvent]:
    """The events of a group commit's accepted outcomes, for the tasks with a callback for
    them: success, a retry to come, failed for good (a sensor waiting for its next poke, or
    skipped, is none of these). A commit of DAGs without task callbacks costs one spec
    lookup per DAG and nothing more."""
    heard = {d for d in {o.dag_id for o in completion.accepted} if spec_for(d).has_task_callbacks}
    if not heard:
        return []
    retrying = {o.ti_id for o in completion.retrying}
    dead = {o.ti_id for o in completion.dead}
    quiet = {o.ti_id for o in (*completion.rescheduled, *completion.skipped)}
    events = []
    for o in completion.accepted:
        task = spec_for(o.dag_id).task_map.get(o.task_id) if o.dag_id in heard else None
        if task is None or not task.callbacks or o.ti_id in quiet:
            continue
        if o.ti_id in retrying:
            event = CallbackEvent.TASK_RETRY
        elif o.ti_id in dead:
            event = CallbackEvent.TASK_FAILURE
        else:
            event = CallbackEvent.TASK_SUCCESS
        if event.value in task.callbacks:
            error = None if event == CallbackEvent.TASK_SUCCESS else o.error
            where = (o.ti_id, o.run_pk, o.dag_id, o.task_id, o.try_number, o.fence_token)
            events.append(TaskEvent(event, *where, error))
    return events


def enqueue_task_events(conn: Connection, events: Iterable[TaskEvent], now: datetime) -> int:
    """Write task events to the outbox (one batched insert); how many."""
    rows = [
        _row(e.event, e.dag_id, e.run_pk, e.error, now, e.ti_id, e.task_id, e.try_number)
        | {"b_fence_token": e.fence_token}
        for e in events
    ]
    sql.execute_many(conn, q.INSERT_CALLBACK, rows)
    return len(rows)


def hears_run_end(spec: DagSpec, state: RunState) -> bool:
    """Whether the DAG has a callback for a run ending in ``state``."""
    event = RUN_EVENTS.get(state)
    return event is not None and event.value in spec.callbacks


def enqueue_run_event(
    conn: Connection,
    spec: DagSpec,
    run_pk: int,
    event: CallbackEvent,
    error: str | None,
    now: datetime,
) -> bool:
    """Write a run's end to the outbox if its DAG has a callback for it. Call it right after
    the guarded update that ended the run changed its row, in the same transaction: then
    the event is written once however many processes decided the same end."""
    if event.value not in spec.callbacks:
        return False
    sql.execute(conn, q.INSERT_CALLBACK, _row(event, spec.dag_id, run_pk, error, now))
    return True


def _row(
    event: CallbackEvent,
    dag_id: str,
    run_pk: int,
    error: str | None,
    now: datetime,
    ti_id: int | None = None,
    task_id: str | None = None,
    try_number: int | None = None,
) -> dict[str, Any]:
    return {
        "b_event": event.value,
        "b_dag_id": dag_id,
        "b_run_pk": run_pk,
        "b_ti_id": ti_id,
        "b_task_id": task_id,
        "b_try_number": try_number,
        "b_fence_token": None,
        "b_error": error,
        "b_created_at": now,
    }


# ---------------------------------------------------------------- delivery


@dataclass(frozen=True)
class CallbackClaim:
    """An outbox row this worker now holds, with what its child needs to run it. Task
    fields are None for run events."""

    id: int
    event: CallbackEvent
    dag_id: str
    run_pk: int
    ti_id: int | None
    task_id: str | None
    try_number: int | None
    fence_token: int | None
    error: str | None
    run_id: str
    logical_date: datetime
    data_interval_start: datetime
    data_interval_end: datetime
    conf: dict = field(default_factory=dict)
    map_index: int = -1


def claim(
    conn: Connection,
    owner: str,
    limit: int,
    hold_seconds: float,
    now: datetime,
    run_pks: Iterable[int] | None = None,
) -> list[CallbackClaim]:
    """Take up to ``limit`` pending callbacks, oldest first, leased to ``owner`` for
    ``hold_seconds``; ``run_pks`` limits them to those runs' events (``sql.IN_CHUNK`` runs
    a statement, oldest first within each: a backfill's thousands of runs would otherwise
    make one statement that stays prepared, megabytes big)."""
    scoped = run_pks is not None
    run_pks = sorted(run_pks or ())
    if limit <= 0 or (scoped and not run_pks):
        return []
    params = {"b_owner": owner, "b_until": now + timedelta(seconds=hold_seconds)}
    if not scoped:
        rows = sql.rows(conn, q.CLAIM_CALLBACKS, {**params, "b_limit": limit})
    else:
        rows = []
        for chunk in sql.chunks(run_pks):
            more = {**params, "b_limit": limit - len(rows), "b_run_pks": chunk}
            rows += sql.rows(conn, q.CLAIM_CALLBACKS_IN_RUNS, more)
            if len(rows) >= limit:
                break
    if not rows:
        return []
    wanted = sorted({r.run_pk for r in rows})
    facts = {r.id: r for r in sql.rows(conn, run_reads.Q.CLAIMED_RUNS, {"b_run_pks": wanted})}
    ti_ids = sorted({r.ti_id for r in rows if r.ti_id is not None})
    indexes = (
        dict(sql.tuples(conn, task_reads.Q.MAP_INDEXES, {"b_ti_ids": ti_ids})) if ti_ids else {}
    )
    return [
        _claim_from(r, facts[r.run_pk], indexes.get(r.ti_id, -1))
        for r in sorted(rows, key=lambda r: r.id)
    ]


def _claim_from(row: Any, run: Any, map_index: int) -> CallbackClaim:
    return CallbackClaim(
        id=row.id,
        event=CallbackEvent(row.event),
        dag_id=row.dag_id,
        run_pk=row.run_pk,
        ti_id=row.ti_id,
        task_id=row.task_id,
        try_number=row.try_number,
        fence_token=row.fence_token,
        error=row.error,
        run_id=run.run_id,
        logical_date=run.logical_date,
        data_interval_start=run.data_interval_start,
        data_interval_end=run.data_interval_end,
        conf=json.loads(run.conf) if run.conf else {},
        map_index=map_index,
    )


@dataclass(frozen=True)
class CallbackEnd:
    """How a claimed callback ended: sent, or failed with the reason; its log range."""

    id: int
    sent: bool
    error: str | None = None
    log: LogRange | None = None


def finish(conn: Connection, owner: str, ends: Iterable[CallbackEnd], now: datetime) -> int:
    """Record how held callbacks ended; returns how many were still held (one the sweep
    ended meanwhile keeps that end)."""
    rows = [
        {
            "b_id": e.id,
            "b_owner": owner,
            "b_state": (CallbackState.SENT if e.sent else CallbackState.FAILED).value,
            "b_now": now,
            "b_error": e.error,
            "b_log": e.log.path if e.log else None,
            "b_log_offset": e.log.offset if e.log else None,
            "b_log_length": e.log.length if e.log else None,
        }
        for e in ends
    ]
    return sql.execute_many(conn, q.FINISH_CALLBACK, rows)


def release(conn: Connection, owner: str, ids: Iterable[int]) -> int:
    """Give held callbacks that no child started back to the outbox (worker shutdown)."""
    rows = [{"b_id": i, "b_owner": owner} for i in ids]
    return sql.execute_many(conn, q.RELEASE_CALLBACK, rows)


def end_lost(conn: Connection, now: datetime, gone: Iterable[str] = ()) -> list[Any]:
    """End ``failed`` the running callbacks whose lease ran out, or whose worker (one of
    ``gone``) has exited: they may have fired already, so they are not run again. Returns
    the rows ended (id, event, dag_id, task_id)."""
    params = {"b_now": now, "b_gone": sorted(gone), "b_error": LOST}
    return sql.rows(conn, q.END_LOST_CALLBACKS, params)


def outstanding(conn: Connection, run_pks: Iterable[int]) -> bool:
    """Whether a callback of these runs is still pending or running."""
    return any(
        sql.tuples(conn, task_reads.Q.OUTSTANDING_CALLBACKS, {"b_run_pks": chunk})
        for chunk in sql.chunks(sorted(run_pks))
    )


def of_attempt(conn: Connection, ti_id: int, fence_token: int) -> list[Any]:
    """The callbacks an attempt fired, in order: event, state, reason, end and log range."""
    return sql.rows(
        conn, task_reads.Q.ATTEMPT_CALLBACKS, {"b_ti_id": ti_id, "b_fence": fence_token}
    )


def of_run(conn: Connection, run_pk: int) -> list[Any]:
    """A run's callbacks, oldest first: event, task and map index, state, the error the
    event carried and the reason the callback failed, when, and its log range."""
    return sql.rows(conn, task_reads.Q.RUN_CALLBACKS, {"b_run_pk": run_pk})

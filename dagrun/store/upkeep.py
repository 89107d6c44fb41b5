"""Upkeep of the queue: wake retries and sensors' pokes whose time has come, reap leases
that ran out (of attempts, and of callbacks, which end failed rather than run twice).

A store operation, not a role: every dagrun process runs one upkeep loop that calls
``sweep`` (``runtime.upkeep``, which says who starts it in each process layout). Any number
of them may sweep at once: every change is a guarded update, and on PostgreSQL reapers skip
the rows another reaper holds.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from dagrun.states import AttemptOutcome, CallbackEvent, TaskState
from dagrun.store import Store, attempts, callbacks, registry, runs, sql
from dagrun.store.attempts import DEFAULT_INFRA_BUDGET
from dagrun.store.callbacks import LOST
from dagrun.store.catalogue import TRANSITIONS as q
from dagrun.store.runs import SpecLookup

if TYPE_CHECKING:
    from sqlalchemy import Connection


log = logging.getLogger("dagrun.upkeep")


def requeue_retries(conn: Connection, now: datetime) -> int:
    """Task instances whose retry time has come go back to the queue."""
    count = sql.execute(conn, q.REQUEUE_DUE_RETRIES, {"b_now": now}).rowcount
    if count:
        runs.announce_work(conn)
    return count


def requeue_pokes(conn: Connection, now: datetime) -> int:
    """Sensors whose next poke is due go back to the queue."""
    count = sql.execute(conn, q.REQUEUE_DUE_POKES, {"b_now": now}).rowcount
    if count:
        runs.announce_work(conn)
    return count


def lease_owners(conn: Connection) -> set[str]:
    """The workers holding leases now."""
    return set(sql.scalars(conn, q.LEASE_OWNERS))


@dataclass(frozen=True)
class Reaped:
    """A task instance whose lease expired, and whether it failed for good."""

    ti_id: int
    run_pk: int
    dag_id: str
    task_id: str
    fence_token: int
    failed: bool


def reap_expired(
    conn: Connection,
    spec_for: SpecLookup,
    now: datetime,
    budget: int = DEFAULT_INFRA_BUDGET,
    gone: Iterable[str] = (),
) -> list[Reaped]:
    """Expired leases become a new attempt at once, or a failure past the budget.

    Lost leases are infrastructure failures (a killed or paused worker), so they count
    against the infrastructure budget and leave the task's ``retries`` for its own errors.
    Leases of ``gone`` owners (workers known to have exited) count as expired already.
    A task failed so writes its failure event, as a failed attempt would.
    """
    reaped = []
    for row in sql.rows(conn, q.EXPIRED_LEASES, {"b_now": now, "b_gone": sorted(gone)}):
        failed = row.infra_failures + 1 > budget
        error = f"lease expired {row.infra_failures + 1} time(s): the worker died or stalled"
        key = {"b_ti_id": row.id, "b_fence": row.fence_token}
        state = TaskState.FAILED if failed else TaskState.QUEUED
        changes = {
            "b_state": state.value,
            "b_now": now,
            "b_end": now if failed else None,
            "b_error": error if failed else None,
        }
        if not sql.execute(conn, q.EXPIRE_LEASE, {**key, **changes}).rowcount:
            continue
        ended = {"b_outcome": AttemptOutcome.LEASE_EXPIRED.value, "b_error": error, "b_now": now}
        sql.execute(conn, q.END_ATTEMPT, {**key, **ended, **attempts.log_params(None)})
        reaped.append(Reaped(row.id, row.run_pk, row.dag_id, row.task_id, row.fence_token, failed))
        if failed:
            _failure_event(conn, spec_for, row, error, now)
    if any(not r.failed for r in reaped):
        runs.announce_work(conn)
    runs.advance_runs(conn, {r.run_pk: spec_for(r.dag_id) for r in reaped if r.failed}, now)
    return reaped


def _failure_event(
    conn: Connection, spec_for: SpecLookup, row: Any, error: str, now: datetime
) -> None:
    """A task failed for good by the reaper: its failure callback hears of it, as of any
    failure (the attempt that lost its lease can fire nothing: its result is stale)."""
    task = spec_for(row.dag_id).task_map.get(row.task_id)
    if task is None or CallbackEvent.TASK_FAILURE.value not in task.callbacks:
        return
    event = callbacks.TaskEvent(
        CallbackEvent.TASK_FAILURE,
        row.id,
        row.run_pk,
        row.dag_id,
        row.task_id,
        row.try_number,
        row.fence_token,
        error,
    )
    callbacks.enqueue_task_events(conn, [event], now)


@dataclass
class SweepReport:
    """What one upkeep sweep did: attempts requeued, leases reaped, callbacks lost."""

    requeued: int = 0
    reaped: list[Reaped] = field(default_factory=list)
    lost_callbacks: list[Any] = field(default_factory=list)

    @property
    def queued_work(self) -> bool:
        return bool(self.requeued or any(not r.failed for r in self.reaped))


def sweep(
    store: Store,
    specs: registry.SpecCache,
    budget: int = DEFAULT_INFRA_BUDGET,
    *,
    reap: bool = True,
) -> SweepReport:
    """Wake retries and pokes whose time has come; turn expired leases into new attempts
    (or failures).

    A lease held by a worker process of this host that no longer exists is reaped at once
    instead of at its expiry, so a backfill restarted after a crash resumes immediately.
    ``reap=False`` only wakes retries and pokes (a process that just saw the database come
    back lets the workers renew their leases first).
    """
    report = SweepReport()
    with store.write() as conn:
        now = store.now(conn)
        report.requeued = requeue_retries(conn, now) + requeue_pokes(conn, now)
        if reap:
            gone = {o for o in lease_owners(conn) if _gone_from_this_host(o)}
            report.reaped = reap_expired(conn, specs.bound(conn), now, budget, gone)
            report.lost_callbacks = callbacks.end_lost(conn, now, gone)
    for r in report.reaped:
        verdict = "failed (infrastructure budget spent)" if r.failed else "queued again"
        log.warning(
            "%s.%s: lease expired (fence %s); %s", r.dag_id, r.task_id, r.fence_token, verdict
        )
    for c in report.lost_callbacks:
        log.warning(
            "%s callback of %s.%s ended failed: %s", c.event, c.dag_id, c.task_id or "", LOST
        )
    return report


def _gone_from_this_host(owner: str) -> bool:
    """True for a worker id (``host:pid:nonce``, see ``worker.Worker``) of this host whose
    process has exited."""
    host, _, rest = owner.partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False

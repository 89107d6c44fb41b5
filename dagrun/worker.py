"""The worker: claim ready task instances, run them in child processes, record outcomes.

One loop, one thread. Each turn collects finished attempts, hands buffered claims to idle
children at once, and then, in a single short transaction, records every outcome (fenced),
advances the affected runs (queueing tasks whose upstreams just finished) and claims the next
batch. That group commit is what makes small tasks cheap; holding a small buffer of claims
keeps children busy while the transaction runs. Leases are extended by heartbeat about every
third of their length, and a lost lease turns the attempt's eventual result into a stale
record instead of a state change.
"""

from __future__ import annotations

import gc
import logging
import os
import socket
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from sqlalchemy import Connection

from dagrun.errors import StoreError
from dagrun.pool import Job, Pool
from dagrun.runner import AttemptRequest, AttemptResult
from dagrun.spec import DagSpec
from dagrun.states import AttemptOutcome
from dagrun.store import Store, registry, transitions
from dagrun.store.engine import Listener, dagrun_home
from dagrun.store.transitions import Claim, Completion, Outcome

log = logging.getLogger("dagrun.worker")

DEFAULT_LEASE_SECONDS = float(os.environ.get("DAGRUN_LEASE_SECONDS", "30"))


@dataclass
class WorkerStats:
    claimed: int = 0
    succeeded: int = 0
    failed: int = 0
    retried: int = 0
    stale: int = 0
    released: int = 0
    finished_runs: int = 0

    def add(self, completion: Completion) -> None:
        for outcome in completion.accepted:
            if outcome.outcome == AttemptOutcome.SUCCESS:
                self.succeeded += 1
            else:
                self.failed += 1
        self.retried += len(completion.retrying)
        self.stale += len(completion.stale)


@dataclass
class WorkerOptions:
    concurrency: int = os.cpu_count() or 2
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    poll_interval: float = 1.0
    grace: float = 30.0
    log_dir: Path = field(default_factory=lambda: dagrun_home() / "logs")
    lease_loss_budget: int = transitions.DEFAULT_LEASE_LOSS_BUDGET
    prefetch: int = 32
    batch_delay: float = 0.01
    short_task: float = 0.05


class Worker:
    """Claims and runs task instances until ``stop()`` or until ``until()`` says done."""

    def __init__(
        self,
        store: Store,
        options: WorkerOptions | None = None,
        *,
        tick: Callable[[], bool] | None = None,
        tick_interval: float = 1.0,
        tick_when_runs_end: bool = False,
        admit: Callable[[Connection, datetime], object] | None = None,
        until: Callable[[], bool] | None = None,
    ):
        self.store = store
        self.options = options or WorkerOptions()
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.tick = tick
        self.tick_interval = tick_interval
        self.tick_when_runs_end = tick_when_runs_end
        self.admit = admit
        self.until = until
        self._last_tick = float("-inf")
        self.stats = WorkerStats()
        self.specs = registry.SpecCache()
        self._runs: dict[int, object] = {}
        self._buffer: deque[Job] = deque()
        self._finished: list[tuple[Job, AttemptResult]] = []
        self._typical_seconds = 0.0
        self._task_seconds: dict[tuple[str, str], float] = {}
        self._stopping = False
        self._hurry = False
        self._last_heartbeat = time.monotonic()
        self._wake = True
        self._listener: Listener | None = None

    def stop(self) -> None:
        """Stop claiming; running attempts get the grace period to finish (signal-safe).
        A second call ends the grace period at once (a second Ctrl-C)."""
        if self._stopping:
            self._hurry = True
        self._stopping = True

    def run(self) -> WorkerStats:
        # Everything imported so far lives as long as the process: out of the collector's
        # sight, full collections stay cheap in the busy loop, and forked children share
        # those pages instead of copying them when the collector touches them.
        gc.freeze()
        pool = Pool(self.options.concurrency, str(self.options.log_dir))
        self._listener = self.store.listen()
        log.info("worker %s started with %d child processes", self.owner, pool.size)
        try:
            self._loop(pool)
            self._shutdown(pool)
        finally:
            pool.close()
            if self._listener is not None:
                self._listener.close()
        return self.stats

    def _loop(self, pool: Pool) -> None:
        last_poll = 0.0
        while not self._stopping:
            self._collect(pool, self._wait_time(pool, last_poll))
            self._dispatch(pool)
            polling = time.monotonic() - last_poll >= self.options.poll_interval
            if self._wake or self._commit_due(pool) or (polling and self._room(pool)):
                self._wake = False
                last_poll = time.monotonic()
                self._step(pool)
                self._dispatch(pool)
            self._heartbeat_if_due(pool)
            self._tick_if_due()
            if self._idle(pool) and self.until and self.until():
                return
        self._step(pool)

    def _collect(self, pool: Pool, timeout: float) -> None:
        """Gather ended attempts; jobs a crashed child never started go back to the front
        of the buffer. Work queued elsewhere wakes a worker with an idle child at once
        (PostgreSQL); a busy one claims it at its next group commit anyway."""
        wake = self._listener.fileno() if self._listener is not None else None
        self._finished.extend(pool.collect(timeout, wake))
        self._buffer.extendleft(reversed(pool.returned()))
        if self._heard_work() and not self._buffer and pool.has_room(1):
            self._wake = True

    def _heard_work(self) -> bool:
        if self._listener is None:
            return False
        try:
            return self._listener.heard()
        except Exception as exc:  # any driver error: go on polling without it
            log.warning("stopped listening for queued work, polling only: %s", exc)
            self._listener.close()
            self._listener = None
            return False

    def _idle(self, pool: Pool) -> bool:
        return not (pool.busy() or self._buffer or self._finished)

    def _commit_due(self, pool: Pool) -> bool:
        """Group commit: record finished attempts once children run short of buffered work,
        enough results have gathered, or the oldest has waited ``batch_delay``."""
        if not self._finished:
            return False
        return (
            len(self._buffer) + pool.waiting() < pool.size
            or len(self._finished) >= pool.size * self._depth() // 2
            or time.monotonic() - self._finished_since() >= self.options.batch_delay
        )

    def _finished_since(self) -> float:
        return min(job.ended for job, _ in self._finished)

    def _wait_time(self, pool: Pool, last_poll: float) -> float:
        if self._wake or (self._buffer and pool.has_room(self._inbox())):
            return 0.0
        now = time.monotonic()
        wait = self.options.poll_interval - (now - last_poll)
        wait = min(wait, self._heartbeat_every - (now - self._last_heartbeat))
        if self.tick is not None:
            wait = min(wait, self.tick_interval - (now - self._last_tick))
        if self._finished:
            wait = min(wait, self._finished_since() + self.options.batch_delay - now)
        deadline = pool.next_deadline()
        if deadline is not None:
            wait = min(wait, deadline - now)
        return max(0.0, min(wait, self.options.poll_interval))

    @property
    def _heartbeat_every(self) -> float:
        return self.options.lease_seconds / 3

    def _room(self, pool: Pool) -> int:
        """How many more claims to take: enough to keep every child busy while the next
        group commit runs."""
        return max(0, self._depth() * pool.size - len(pool.jobs()) - len(self._buffer))

    def _depth(self) -> int:
        """Claims per child. Short tasks get a deep buffer (``prefetch``), so one commit
        serves many of them; long tasks get one each, so a worker never sits on queued
        work that another worker could start now."""
        return self.options.prefetch if self._typical_seconds < self.options.short_task else 1

    def _inbox(self) -> int:
        """Jobs per message to a child: a quarter of the claims it may hold, so short tasks
        share a pipe round trip and long ones go one at a time."""
        return max(1, self._depth() // 4)

    def _learn(self, finished: list[tuple[Job, AttemptResult]]) -> None:
        """Keep moving averages of how long attempts take: overall (how deep to prefetch)
        and per task (which jobs may wait behind others in a child's inbox)."""
        for job, result in finished:
            self._typical_seconds += 0.2 * (result.duration - self._typical_seconds)
            key = (job.request.dag_id, job.request.task_id)
            before = self._task_seconds.get(key, result.duration)
            self._task_seconds[key] = before + 0.5 * (result.duration - before)

    def _is_short(self, dag_id: str, task_id: str) -> bool:
        seconds = self._task_seconds.get((dag_id, task_id))
        return seconds is not None and seconds < self.options.short_task

    def _step(self, pool: Pool) -> None:
        """One group commit: record finished attempts, advance runs, claim more work.

        A transient database error (a deadlock victim, a restarting server) rolls the whole
        commit back; the finished attempts are kept and recorded at the next turn.
        """
        finished, self._finished = self._finished, []
        self._learn(finished)
        outcomes = [_outcome(job, result) for job, result in finished]
        try:
            completion, claims, jobs = self._commit(pool, outcomes)
        except StoreError as exc:
            self._finished = finished + self._finished
            log.warning("group commit rolled back, will retry: %s", exc)
            time.sleep(0.05)
            return
        self._buffer.extend(jobs)
        self.stats.claimed += len(claims)
        self.stats.add(completion)
        for outcome in completion.stale:
            log.warning(
                "discarded stale result of task instance %s (fence %s)",
                outcome.ti_id,
                outcome.fence_token,
            )
        self.stats.finished_runs += len(completion.finished_runs)
        if completion.finished_runs and self.tick_when_runs_end:
            self._last_tick = float("-inf")

    def _commit(self, pool: Pool, outcomes: list[Outcome]):
        with self.store.write() as conn:
            now = self.store.now(conn)
            spec_for = self.specs.bound(conn)
            completion = transitions.complete(conn, self.owner, outcomes, spec_for, now)
            if completion.finished_runs and self.admit is not None:
                self.admit(conn, now)
            claims = transitions.claim(
                conn,
                self.store.caps,
                self.owner,
                0 if self._stopping else self._room(pool),
                self.options.lease_seconds,
                now,
                self._runs,
            )
            jobs = [self._job(conn, c, spec_for(c.dag_id)) for c in claims]
        return completion, claims, jobs

    def _tick_if_due(self) -> None:
        """Run the tick hook on its interval, and at once after a run ended when asked
        (the embedded scheduler admits the next runs then). An ``admit`` hook does that
        inside the group commit that finished the runs, so their first tasks are claimed
        in it too."""
        if self.tick is None or time.monotonic() - self._last_tick < self.tick_interval:
            return
        self._last_tick = time.monotonic()
        if self.tick():
            self._wake = True

    def _job(self, conn: Connection, claim: Claim, spec: DagSpec) -> Job:
        task = spec.task_map[claim.task_id]
        inputs = transitions.upstream_values(conn, claim.run_pk, task.data_inputs)
        request = AttemptRequest(
            dag_id=claim.dag_id,
            task_id=claim.task_id,
            fileloc=spec.fileloc,
            timezone=spec.timezone,
            run_id=claim.run_id,
            logical_date=claim.logical_date,
            data_interval_start=claim.data_interval_start,
            data_interval_end=claim.data_interval_end,
            try_number=claim.try_number,
            fence_token=claim.fence_token,
            ti_id=claim.ti_id,
            params=claim.conf,
            inputs=inputs,
            log_dir=str(self.options.log_dir),
            db_url=self.store.url,
        )
        short = self._is_short(claim.dag_id, claim.task_id)
        return Job(request, task.execution_timeout, payload=claim, short=short)

    def _dispatch(self, pool: Pool) -> None:
        if self._buffer:
            pool.dispatch(self._buffer, self._inbox())

    def _heartbeat_if_due(self, pool: Pool) -> None:
        if time.monotonic() - self._last_heartbeat < self._heartbeat_every:
            return
        self._last_heartbeat = time.monotonic()
        held = [_lease(j) for j in [*pool.jobs(), *self._buffer]]
        if not held:
            return
        with self.store.write() as conn:
            lost = transitions.extend_leases(
                conn, self.owner, held, self.options.lease_seconds, self.store.now(conn)
            )
        for ti_id, fence in sorted(lost):
            log.warning(
                "lease lost for task instance %s (fence %s); its result will be discarded",
                ti_id,
                fence,
            )

    def _shutdown(self, pool: Pool) -> None:
        """Release unstarted claims now; give running attempts the grace period, then kill."""
        self._release([_lease(j) for j in self._buffer], "worker stopping before start")
        self._buffer.clear()
        deadline = time.monotonic() + self.options.grace
        if pool.busy():
            log.info(
                "waiting up to %.0f s for %d running attempt(s)",
                self.options.grace,
                len(pool.busy()),
            )
        while pool.busy() and time.monotonic() < deadline and not self._hurry:
            self._collect(pool, min(1.0, max(0.0, deadline - time.monotonic())))
            self._release([_lease(j) for j in self._buffer], "worker stopping before start")
            self._buffer.clear()
            if self._finished:
                self._step(pool)
            self._heartbeat_if_due(pool)
        killed = pool.kill_busy()
        if killed:
            self._release([_lease(j) for j in killed], "worker stopped: grace period over")

    def _release(self, leases: list[tuple[int, int]], reason: str) -> None:
        if not leases:
            return
        with self.store.write() as conn:
            count = transitions.release(conn, self.owner, leases, self.store.now(conn), reason)
        self.stats.released += count
        log.info("released %d task instance(s) back to the queue", count)


def _lease(job: Job) -> tuple[int, int]:
    return job.payload.ti_id, job.payload.fence_token


def _outcome(job: Job, result: AttemptResult) -> Outcome:
    claim: Claim = job.payload
    return Outcome(
        ti_id=claim.ti_id,
        run_pk=claim.run_pk,
        dag_id=claim.dag_id,
        task_id=claim.task_id,
        fence_token=claim.fence_token,
        outcome=result.outcome,
        error=result.error,
        return_value=result.return_value,
        duration=result.duration,
        log=result.log,
    )

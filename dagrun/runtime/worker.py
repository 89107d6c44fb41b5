"""The worker: claim ready task instances, run them in child processes, record outcomes.

One loop does claim -> run -> complete and nothing else. Each turn collects finished
attempts, hands buffered claims to idle children at once, and then, in a single short
transaction, records every outcome (fenced), advances the affected runs (queueing tasks
whose upstreams just finished) and claims the next batch. That group commit is what makes
small tasks cheap; holding a small buffer of claims keeps children busy while it runs.

How much to claim, and when to commit or wait, is the loop's pacing (``pacing.Pacing``).
Leases are kept on a thread of their own (``leases.LeaseKeeper``), which extends them about
every third of their length, so no slow step of the loop, and nothing another role does in
this process, can make a healthy attempt lose its lease. A lost lease turns the attempt's
eventual result into a stale record. The queue's upkeep is not the worker's: the process
that runs it starts one (``upkeep.UpkeepLoop``).

The loop ends when a stop is asked for (``stop()``: a signal, the driver, a fatal error),
or at an exit the options ask for: nothing left to run (``once``), ``max_tasks`` attempts
run, or ``max_idle`` seconds with nothing to run.

The database may go away: the loop then stops claiming, keeps its children running and
their results, and records them once the database is back (fenced, so a lease that expired
meanwhile is an ordinary stale completion); past ``DAGRUN_DB_OUTAGE_SECONDS`` it gives up.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from dagrun import settings
from dagrun.errors import StoreError
from dagrun.runtime.attempt_pool import AttemptPool, Job
from dagrun.runtime.jobs import Jobs, delivery_of, is_callback, lease_of, outcome_of
from dagrun.runtime.leases import LeaseKeeper
from dagrun.runtime.pacing import Pacing
from dagrun.runtime.requests import AttemptResult
from dagrun.states import AttemptOutcome, RunState
from dagrun.store import Store, attempts, callbacks, registry, run_reads, runs
from dagrun.store.attempts import Claim, Completion, Outcome
from dagrun.store.callbacks import CallbackClaim, CallbackEnd
from dagrun.store.clock import ClockWatch
from dagrun.store.engine import Listener
from dagrun.store.heartbeats import Pulse, Role
from dagrun.store.location import dagrun_home
from dagrun.store.outage import note_failure

if TYPE_CHECKING:
    from sqlalchemy import Connection

log = logging.getLogger("dagrun.worker")

#: Called inside the group commit that finished runs, before the next claim: the one place
#: a worker lets another role act (a backfill admits its next runs there, so their first
#: tasks are claimed in the same transaction).
CommitHook = Callable[["Connection", Completion, datetime], None]


@dataclass
class WorkerStats:
    """Counts of what a worker did: its result, summed by the run driver."""

    claimed: int = 0
    succeeded: int = 0
    failed: int = 0
    retried: int = 0
    stale: int = 0
    released: int = 0
    finished_runs: int = 0
    #: Sensors' pokes that found their condition unmet (their attempts neither succeeded
    #: nor failed).
    rescheduled: int = 0

    def add(self, completion: Completion) -> None:
        self.rescheduled += len(completion.rescheduled)
        for outcome in completion.accepted:
            if outcome.outcome == AttemptOutcome.SUCCESS:
                self.succeeded += 1
            elif outcome.outcome not in (AttemptOutcome.RESCHEDULED, AttemptOutcome.SKIPPED):
                self.failed += 1
        self.retried += len(completion.retrying)
        self.stale += len(completion.stale)
        self.finished_runs += len(completion.finished_runs)


@dataclass
class WorkerOptions:
    """How a worker claims and runs: its concurrency, lease, polling and grace period."""

    concurrency: int = os.cpu_count() or 2
    lease_seconds: float = attempts.DEFAULT_LEASE_SECONDS
    poll_interval: float = 1.0
    #: How often the lease keeper looks for attempts an operator stopped.
    look_interval: float = 1.0
    grace: float = 30.0
    log_dir: Path = field(default_factory=lambda: dagrun_home() / "logs")
    infra_budget: int = attempts.DEFAULT_INFRA_BUDGET
    prefetch: int = 32
    batch_delay: float = 0.01
    short_task: float = 0.05
    #: How long a shell attempt an operator stopped (cancel, mark) has after SIGTERM.
    stop_grace: float = 10.0
    #: How long one event's callbacks may run before they are killed.
    callback_timeout: float = field(default_factory=lambda: settings.get("worker.callback_timeout"))
    #: DAG files the worker's children import as they start (see ``attempt_pool.AttemptPool``).
    preload: tuple[str, ...] = ()
    #: Exit once nothing is left to run: what is ready now, and what that makes ready.
    once: bool = False
    #: Exit once this many attempts were claimed and have ended (claiming no more).
    max_tasks: int | None = None
    #: Exit after this many seconds with nothing to run.
    max_idle: float | None = None

    @property
    def exits(self) -> bool:
        """Whether the worker exits of itself (else only when stopped)."""
        return self.once or self.max_tasks is not None or self.max_idle is not None


class Worker:
    """Claims and runs task instances until ``stop()`` or an exit its options ask for."""

    def __init__(
        self,
        store: Store,
        options: WorkerOptions | None = None,
        *,
        on_commit: CommitHook | None = None,
        scope: Callable[[], Collection[int]] | None = None,
        callback_scope: Callable[[], Collection[int]] | None = None,
    ):
        self.store = store
        self.options = options or WorkerOptions()
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.on_commit = on_commit
        self.scope = scope
        self.callback_scope = callback_scope or scope
        self.stats = WorkerStats()
        self.specs = registry.SpecCache()
        self.clock = ClockWatch(store)
        self.pulse = Pulse(Role.WORKER, self.owner)
        self.leases = LeaseKeeper(
            store,
            self.owner,
            lease_seconds=self.options.lease_seconds,
            look_interval=self.options.look_interval,
            fail=self.fail,
            stop_attempts=self.stop_attempts,
            pulse=self.pulse,
            offset=lambda: self.clock.offset,
        )
        self.pace: Pacing  # set by ``run``, once it has its pool
        self._pool: AttemptPool | None = None
        self.jobs: Jobs
        self._taken: set[tuple[int, int]] = set()
        self._taken_lock = threading.Lock()
        self._runs: dict[int, object] = {}
        self._buffer: deque[Job] = deque()
        self._finished: list[tuple[Job, AttemptResult]] = []
        self._stopping = False
        self._hurry = False
        self._fatal: BaseException | None = None
        self._wake = True
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._listener: Listener | None = None
        self._listen_tried = float("-inf")
        self._started = False  # ``run`` forked its children and listened a first time
        self._idle_since: float | None = None
        self._infra_seen: set[str] = set()
        self._callbacks_due = 0.0  # when to look for other processes' callback events

    # ------------------------------------------------------------ control, from any thread

    def stop(self) -> None:
        """Stop claiming; running attempts get the grace period to finish (signal-safe).
        A second call ends the grace period at once (a second Ctrl-C)."""
        if self._stopping:
            self._hurry = True
        self._stopping = True
        self.wake()

    def wake(self) -> None:
        """Claim now rather than at the next poll: work was queued (thread- and
        signal-safe)."""
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._wake_w, b"!")

    def swept(self, queued_work: bool) -> None:
        """From the process's upkeep loop after each sweep, so the database answers: listen
        again if an outage closed the listening connection (on that thread, where a slow
        connect holds up no claim and no lease), and claim now what was queued or missed."""
        if self._listener is None and self._started and self.store.caps.notifies:
            self._listen()
            queued_work = queued_work or self._listener is not None
        if queued_work:
            self.wake()

    def stop_attempts(self, leases: set[tuple[int, int]]) -> None:
        """From the lease keeper: an operator took these attempts away (cancel, mark);
        stop them (thread-safe)."""
        with self._taken_lock:
            self._taken |= leases
        self.wake()

    def fail(self, error: BaseException) -> None:
        """A thread serving this worker hit an error it cannot ride out: stop, and have
        ``run`` raise it."""
        if self._fatal is None:
            self._fatal = error
        self._hurry = True
        self.stop()

    def __del__(self) -> None:
        # The wake-up pipe lives as long as the worker: threads that may still call
        # ``wake`` hold a reference, so it is never written after it is closed.
        for fd in (getattr(self, "_wake_r", None), getattr(self, "_wake_w", None)):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)

    # ------------------------------------------------------------ the loop

    def fork_children(self) -> AttemptPool:
        """The attempt children, forked once. A caller that starts threads of its own forks
        them first (``driver``): children forked from a process with no other thread
        import the runners themselves (``attempt_pool.load_runners``)."""
        if self._pool is None:
            # Everything imported so far lives as long as the process: out of the
            # collector's sight, full collections stay cheap in the busy loop, and forked
            # children share those pages instead of copying them when it touches them.
            gc.freeze()
            self.clock.check()  # before the children fork: they inherit the measured offset
            options = self.options
            self._pool = AttemptPool(
                options.concurrency, str(options.log_dir), options.stop_grace, options.preload
            )
        return self._pool

    def run(self) -> WorkerStats:
        options = self.options
        pool = self.fork_children()
        self.pace = Pacing(
            pool,
            prefetch=options.prefetch,
            short_task=options.short_task,
            batch_delay=options.batch_delay,
            poll_interval=options.poll_interval,
        )
        self.jobs = Jobs(
            str(options.log_dir), self.store.url, options.callback_timeout, self.pace.is_short
        )
        self._listen()
        self._started = True
        self.leases.start()
        log.info("worker %s started with %d child processes", self.owner, pool.size)
        try:
            self._loop(pool, self.pace)
            self._shutdown(pool)
        finally:
            self.leases.stop()
            pool.close()
            self._pool = None
            if self._listener is not None:
                self._listener.close()
        if self._fatal is not None:
            raise self._fatal
        self.pulse.forget(self.store)
        return self.stats

    def _loop(self, pool: AttemptPool, pace: Pacing) -> None:
        """Claim -> run -> complete until a stop is asked for (``stop()``: a signal, the
        driver, a fatal error), or an exit the options ask for is due (``_exit_due``)."""
        exits = self.options.exits
        while not self._stopping:
            self._collect(pool, pace.wait_time(self._finished, self._buffer, self._wake))
            self._dispatch(pool)
            if pace.commit_now(self._finished, self._buffer, self._wake):
                self._wake = False
                self.clock.check()
                self._step(pool)
                self._dispatch(pool)
                if exits and self._exit_due(pool):
                    self._stopping = True
        self._step(pool)

    def _exit_due(self, pool: AttemptPool) -> bool:
        """Once nothing is held (every claim ended and recorded), an exit the options ask
        for: ``once``, ``max_tasks`` attempts run, or ``max_idle`` seconds idle (seen at
        the polls of an idle worker)."""
        if pool.busy() or self._buffer or self._finished:
            self._idle_since = None
            return False
        options, now = self.options, time.monotonic()
        self._idle_since = self._idle_since or now
        if options.once:
            reason = "nothing left to run (once)"
        elif options.max_tasks is not None and self.stats.claimed >= options.max_tasks:
            reason = f"{self.stats.claimed} attempt(s) run (max_tasks)"
        elif options.max_idle is not None and now - self._idle_since >= options.max_idle:
            reason = f"nothing to run for {options.max_idle:g} s (max_idle)"
        else:
            return False
        log.info("worker %s exits: %s", self.owner, reason)
        return True

    def _collect(self, pool: AttemptPool, timeout: float) -> None:
        """Gather ended attempts; jobs a crashed child never started go back to the front
        of the buffer. A wake-up (work queued, a stop) or, on PostgreSQL, a notification
        ends the wait early."""
        wake = [self._wake_r]
        if self._listener is not None:
            wake.append(self._listener.fileno())
        self._finished.extend(pool.collect(timeout, wake))
        self._buffer.extendleft(reversed(pool.returned()))
        with contextlib.suppress(BlockingIOError):
            if os.read(self._wake_r, 4096):
                self._wake = True
        self._stop_taken(pool)
        if self._heard_work() and not self._buffer and pool.has_room(1):
            self._wake = True

    def _stop_taken(self, pool: AttemptPool) -> None:
        """Drop the taken attempts not started yet and have the pool stop the others."""
        with self._taken_lock:
            taken, self._taken = self._taken, set()
        if not taken:
            return
        kept = [job for job in self._buffer if lease_of(job) not in taken or is_callback(job)]
        dropped = len(self._buffer) - len(kept)
        self._buffer = deque(kept)
        for job in pool.jobs():
            job.taken = job.taken or (not is_callback(job) and lease_of(job) in taken)
        log.info(
            "stopping %d attempt(s) an operator cancelled or marked (%d not started yet)",
            len(taken),
            dropped,
        )

    def _heard_work(self) -> bool:
        if self._listener is None:
            return False
        try:
            return self._listener.heard()
        except Exception as exc:  # any driver error: poll, and listen again later
            log.warning("stopped listening for queued work, polling meanwhile: %s", exc)
            self._listener.close()
            self._listener = None
            return False

    def _listen(self) -> None:
        """(Re)open the LISTEN connection, at most every few seconds: at start, and from the
        upkeep's thread after an outage."""
        if self._listener is None and time.monotonic() - self._listen_tried > 5:
            self._listen_tried = time.monotonic()
            self._listener = self.store.listen()

    def _step(self, pool: AttemptPool) -> None:
        """One group commit: record finished attempts, advance runs, claim more work.

        A database error rolls the whole commit back; the finished attempts are kept and
        recorded at a later turn, after a backoff, while the children run on. Claiming
        stops meanwhile. Past the outage limit the worker gives up (``OutageTooLong``).
        """
        everything, self._finished = self._finished, []
        finished = [(job, result) for job, result in everything if not is_callback(job)]
        delivered = [delivery_of(job, result) for job, result in everything if is_callback(job)]
        outcomes = [outcome_of(job, result) for job, result in finished]
        ended = [lease_of(j) for j, _ in finished]
        self.leases.forget(ended)  # before the commit: a lease is never "lost" by ending
        try:
            completion, claims, jobs = self._commit(pool, outcomes, delivered)
        except StoreError as exc:
            self.leases.hold(ended)
            self._finished = everything + self._finished
            self.pace.commit_failed()
            note_failure(self.store.health, exc, "group commit")
            return
        self.pace.committed(finished)
        calls = [job for job in jobs if is_callback(job)]
        attempts_ = [job for job in jobs if not is_callback(job)]
        self.leases.hold([lease_of(j) for j in attempts_])
        self._buffer.extendleft(reversed(calls))  # first: a child is kept free for them
        self._buffer.extend(attempts_)
        self.stats.claimed += len(claims)
        self.stats.add(completion)
        self._report(completion)

    def _commit(self, pool: AttemptPool, outcomes: list[Outcome], delivered: list[CallbackEnd]):
        with self.store.write() as conn:
            now = self.store.now(conn)
            spec_for = self.specs.bound(conn)
            completion = attempts.complete(
                conn, self.owner, outcomes, spec_for, now, self.options.infra_budget, announce=False
            )  # what this commit leaves queued is announced once it claimed
            callbacks.finish(conn, self.owner, delivered, now)
            for run_pk in completion.finished_runs:  # the cache keeps what is running
                self._runs.pop(run_pk, None)
            if completion.finished_runs and self.on_commit is not None:
                self.on_commit(conn, completion, now)
            claims = attempts.claim(
                conn,
                self.owner,
                self._claim_room(),
                self.options.lease_seconds,
                now,
                self._runs,
                None if self.scope is None else self.scope(),
            )
            if _left_queued(completion, claims):
                runs.announce_work(conn)
            jobs = [self.jobs.for_attempt(conn, c, spec_for(c.dag_id)) for c in claims]
            calls = self._claim_callbacks(conn, pool, completion, now)
            jobs += [self.jobs.for_callback(c, spec_for(c.dag_id)) for c in calls]
        return completion, claims, jobs

    def _claim_room(self) -> int:
        """Claims to take now: the pace's room, none once stopping, and no more than
        ``max_tasks`` in all."""
        if self._stopping:
            return 0
        room = self.pace.room(len(self._buffer))
        if self.options.max_tasks is None:
            return room
        return min(room, self.options.max_tasks - self.stats.claimed)

    def _claim_callbacks(
        self, conn: Connection, pool: AttemptPool, completion: Completion, now: datetime
    ) -> list[CallbackClaim]:
        """Take pending callback events for the idle children: at once when this commit
        wrote some, else at most once a poll interval (other processes write them too).
        Held for their time limit and a lease's margin, and never extended: a child is free
        for each, so each starts at once."""
        if self._stopping or not (completion.callbacks or time.monotonic() >= self._callbacks_due):
            return []
        idle = sum(1 for child in pool.children if not child.inbox)
        room = max(0, idle - sum(1 for job in self._buffer if is_callback(job)))
        hold = self.options.callback_timeout + self.options.lease_seconds
        scope = None if self.callback_scope is None else self.callback_scope()
        calls = callbacks.claim(conn, self.owner, room, hold, now, scope)
        more = room > 0 and len(calls) == room  # maybe more pending: look at the next commit
        self._callbacks_due = 0.0 if more else time.monotonic() + self.options.poll_interval
        return calls

    def _report(self, completion: Completion) -> None:
        """One line per run that ended failed, per stale result, and per kind of
        infrastructure failure."""
        failed = [pk for pk, state in completion.finished_runs.items() if state == RunState.FAILED]
        if failed:
            self._report_failed_runs(failed)
        for outcome in completion.stale:
            log.warning(
                "discarded stale result of task instance %s (fence %s)",
                outcome.ti_id,
                outcome.fence_token,
            )
        for outcome in completion.accepted:
            if outcome.outcome == AttemptOutcome.INFRA_FAILED:
                problem = (outcome.error or "").split(":")[0]
                if problem not in self._infra_seen:
                    self._infra_seen.add(problem)
                    log.warning(
                        "attempts cannot run here: %s; their tasks wait and try again "
                        "(infrastructure budget %d per task)",
                        outcome.error,
                        self.options.infra_budget,
                    )

    def _report_failed_runs(self, run_pks: list[int]) -> None:
        """Name each run that ended failed (read once: failures are rare, successes cost
        nothing here)."""
        try:
            with self.store.read() as conn:
                rows = [run_reads.run_by_pk(conn, pk) for pk in run_pks]
        except StoreError:
            return
        for row in rows:
            log.warning(
                "run %s of %s ended failed: see `dagrun runs show %s %s`",
                row.run_id,
                row.dag_id,
                row.dag_id,
                row.run_id,
                extra={"dag_id": row.dag_id, "run_id": row.run_id},
            )

    def _dispatch(self, pool: AttemptPool) -> None:
        """Start buffered attempts, unless the last commit failed (the database may be
        away: nothing new starts whose lease could not be kept)."""
        if self._buffer and time.monotonic() >= self.pace.retry_at:
            pool.dispatch(self._buffer, self.pace.inbox())

    # ------------------------------------------------------------ shutdown

    def _shutdown(self, pool: AttemptPool) -> None:
        """Release unstarted claims now; give running attempts the grace period, then kill."""
        self._release_buffer()
        deadline = time.monotonic() + self.options.grace
        if pool.busy() and not self._hurry:
            log.info(
                "waiting up to %.0f s for %d running attempt(s)",
                self.options.grace,
                len(pool.busy()),
            )
        while pool.busy() and time.monotonic() < deadline and not self._hurry:
            self._collect(pool, min(1.0, max(0.0, deadline - time.monotonic())))
            self._release_buffer()
            if self._finished and time.monotonic() >= self.pace.retry_at:
                self._step(pool)
        killed = pool.kill_busy()
        if killed and self._fatal is None:
            self._release(killed, "worker stopped: grace period over")

    def _release_buffer(self) -> None:
        if self._buffer and self._fatal is None:
            self._release(list(self._buffer), "worker stopping before start")
        self._buffer.clear()

    def _release(self, jobs: list[Job], reason: str) -> None:
        """Give claims back: attempts to the queue, callback events not started to the
        outbox; a callback killed while it ran ends failed (it may have fired)."""
        leases = [lease_of(j) for j in jobs if not is_callback(j)]
        calls = [j.payload.id for j in jobs if is_callback(j) and not j.started]
        killed = [
            CallbackEnd(j.payload.id, False, reason) for j in jobs if is_callback(j) and j.started
        ]
        if not (leases or calls or killed):
            return
        try:
            with self.store.write() as conn:
                now = self.store.now(conn)
                count = attempts.release(conn, self.owner, leases, now, reason)
                callbacks.release(conn, self.owner, calls)
                callbacks.finish(conn, self.owner, killed, now)
        except StoreError as exc:
            log.warning(
                "could not release %d task instance(s); their leases expire: %s", len(leases), exc
            )
            return
        self.leases.forget(leases)
        self.stats.released += count
        if count:
            log.info("released %d task instance(s) back to the queue", count)


def _left_queued(completion: Completion, claims: list[Claim]) -> bool:
    """Whether tasks a group commit queued may be left after its claims: then it tells the
    listening workers (PostgreSQL); a chained task it claimed itself wakes none of them,
    nor this worker for an empty commit of its own."""
    if completion.queued is None:
        return True
    return not completion.queued <= {(c.run_pk, c.task_id) for c in claims}

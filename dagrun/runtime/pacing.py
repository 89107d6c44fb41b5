"""A worker's pacing: how much it takes on, and when its loop commits or waits.

Why a class of its own: a worker is fast on small tasks because of group commits (one
transaction records many outcomes and claims the next batch while the children run what is
buffered), and how deep that buffer should be depends on how long tasks take, which the
worker only learns as they end. Short tasks get a deep buffer, so one commit serves many;
long ones get one claim per child, so a worker never sits on queued work that another could
start now. Those decisions, and the timing of the loop built on them (when a group commit
is due, how long to wait for results, when to try again after a commit failed), are
tuned together; kept here, they read as a whole, and the worker's loop reads as claim ->
run -> complete.

Every method is called from the worker's loop thread, most on every turn: keep them cheap.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence

from dagrun.runtime.attempt_pool import AttemptPool, Job
from dagrun.runtime.requests import AttemptResult
from dagrun.timing.backoff import Backoff

Finished = Sequence[tuple[Job, AttemptResult]]


class Pacing:
    """The pace of one worker's loop over ``pool``: claims to take, jobs per message to a
    child, when to commit and how long to wait, learnt from the durations of attempts."""

    def __init__(
        self,
        pool: AttemptPool,
        *,
        prefetch: int,
        short_task: float,
        batch_delay: float,
        poll_interval: float,
    ) -> None:
        self.pool = pool
        self.prefetch = prefetch
        self.short_task = short_task
        self.batch_delay = batch_delay
        self.poll_interval = poll_interval
        #: When the loop last committed (a poll, whatever woke it).
        self.last_poll = 0.0
        #: No commit before this, and no attempt starts (the last commit failed: the
        #: database may be away, and no lease of a new attempt could be kept).
        self.retry_at = 0.0
        self._backoff = Backoff()
        self._typical_seconds: float | None = None
        self._task_seconds: dict[tuple[str, str | None], float] = {}

    def commit_now(self, finished: Finished, buffer: deque[Job], woken: bool) -> bool:
        """Whether the loop commits now (and if so, the next poll is an interval from now):
        not before ``retry_at``; at once when woken (work was queued, or heard of); when
        finished attempts are due (children run short of buffered work, enough results
        have gathered, or the oldest has waited ``batch_delay``: the group commit); else
        at the poll interval, if there is room for more claims."""
        now = time.monotonic()
        if now < self.retry_at:
            return False
        pool = self.pool
        due = (
            woken
            or (
                bool(finished)
                and (
                    len(buffer) + pool.waiting() < pool.size
                    or len(finished) >= pool.size * self.depth() // 2
                    or now - _oldest(finished) >= self.batch_delay
                )
            )
            or (now - self.last_poll >= self.poll_interval and self.room(len(buffer)) > 0)
        )
        if due:
            self.last_poll = now
        return due

    def wait_time(self, finished: Finished, buffer: deque[Job], woken: bool) -> float:
        """How long the loop may wait for results before its next turn."""
        now = time.monotonic()
        limits = [self.poll_interval]
        deadline = self.pool.next_deadline()
        if deadline is not None:
            limits.append(deadline - now)
        if self.retry_at > now:  # the last commit failed: wait for results or the retry
            return max(0.0, min(self.retry_at - now, *limits))
        if woken or (buffer and self.pool.has_room(self.inbox())):
            return 0.0
        wait = self.poll_interval - (now - self.last_poll)
        if finished:
            wait = min(wait, _oldest(finished) + self.batch_delay - now)
        return max(0.0, min(wait, *limits))

    def commit_failed(self) -> None:
        """Try the next commit after a backoff."""
        self.retry_at = time.monotonic() + self._backoff.next()

    def committed(self, finished: Finished) -> None:
        """A commit recorded ``finished``: the backoff starts again, and their durations
        are learnt."""
        self._backoff.reset()
        self._learn(finished)

    def room(self, buffered: int) -> int:
        """How many more claims to take: enough to keep every child busy while the next
        group commit runs."""
        return max(0, self.depth() * self.pool.size - len(self.pool.jobs()) - buffered)

    def depth(self) -> int:
        """Claims per child. Short tasks get a deep buffer (``prefetch``), so one commit
        serves many of them; long tasks get one each, so a worker never sits on queued
        work that another worker could start now. A new worker knows neither yet: one."""
        typical = self._typical_seconds
        return self.prefetch if typical is not None and typical < self.short_task else 1

    def inbox(self) -> int:
        """Jobs per message to a child: a quarter of the claims it may hold, so short tasks
        share a pipe round trip and long ones go one at a time."""
        return max(1, self.depth() // 4)

    def is_short(self, dag_id: str, task_id: str) -> bool:
        """Whether this task's attempts have been short (they may wait behind others in a
        child's inbox)."""
        seconds = self._task_seconds.get((dag_id, task_id))
        return seconds is not None and seconds < self.short_task

    def _learn(self, finished: Finished) -> None:
        """Keep moving averages of how long attempts take: overall (how deep to prefetch)
        and per task (which jobs may wait behind others in a child's inbox)."""
        for job, result in finished:
            typical = result.duration if self._typical_seconds is None else self._typical_seconds
            self._typical_seconds = typical + 0.2 * (result.duration - typical)
            key = (job.request.dag_id, job.request.task_id)
            before = self._task_seconds.get(key, result.duration)
            self._task_seconds[key] = before + 0.5 * (result.duration - before)


def _oldest(finished: Finished) -> float:
    """When the oldest of the finished attempts ended."""
    return min(job.ended for job, _ in finished)

"""Reusable child processes that run attempts, each child one at a time.

Children are forked once and reused, so an attempt costs a pipe message rather than an
interpreter start. The worker may hand a child several short attempts in one message (its
inbox): the child runs them in order and answers each, so a small task costs a fraction of
a round trip. Only the first attempt of an inbox is running; its deadline starts when the
one before it ends.

Nothing a child does ends or silences the worker: a child that dies (``os._exit``, a
signal, a segfault, the OOM killer, a closed pipe) fails only the attempt it was running,
with the reason, and is replaced with one line in the worker's log; the attempts waiting in
its inbox go back to the worker untouched. A child that died before its attempt started
(it wrote nothing of it) hands that attempt back too, a few times, and then ends it as an
infrastructure failure, not the task's. A timed-out attempt is killed with its child and
any shell process group it started. When the worker itself dies, each child kills its
attempt's process groups and its own, so nothing runs on.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import logging
import os
import pickle
import select
import signal
import struct
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from dagrun import processes
from dagrun.runtime.requests import AttemptRequest, AttemptResult, CallbackRequest
from dagrun.states import AttemptOutcome
from dagrun.store import logfiles, rendered
from dagrun.store.logfiles import LogRange

if TYPE_CHECKING:
    from dagrun.runtime.runner import DagCache

log = logging.getLogger("dagrun.worker")

#: How often one attempt may be handed back by children that died before starting it; the
#: next such death ends it as an infrastructure failure (children that cannot start it).
LOST_BEFORE_START_LIMIT = 2


@dataclass(frozen=True)
class Preload:
    """Sent to a child forked ahead (``prefork``) once its pool takes it: the DAG files to
    import before its first attempt, as a child forked by the pool does as it starts."""

    paths: tuple[str, ...]


@dataclass
class Job:
    """An attempt handed to a child, with what the worker needs to record its end."""

    request: AttemptRequest | CallbackRequest
    timeout: float | None
    payload: Any = None
    timeout_name: str = "execution_timeout"  # what a timeout is said to come from
    started: float = 0.0
    ended: float = 0.0
    pgids: list[int] = field(default_factory=list)
    short: bool = False  # its task ran briefly before, so others may wait behind it
    lost: int = 0  # children that died before starting it
    taken: bool = False  # an operator took its task instance away: stop it
    stop_deadline: float | None = None  # SIGTERM sent; killed at this time

    @property
    def deadline(self) -> float | None:
        return self.started + self.timeout if self.timeout else None


class Child(processes.ForkedChild):
    """A reusable child running attempts: the jobs it holds (its inbox), the bytes of its
    answers read so far, where its last attempt's log ended."""

    def __init__(self, preload: Sequence[str] = ()) -> None:
        if threading.active_count() > 1:
            with processes.FORK_GUARD.using():  # no other thread forks mid-import
                load_runners()
        super().__init__(child_main, (tuple(preload),), on_parent_death=_kill_attempt_groups)
        self.inbox: deque[Job] = deque()
        self.last_log: LogRange | None = None
        self.broken = False
        self._received = bytearray()

    def messages(self) -> list[Any]:
        """The messages that arrived whole, after one read of what the pipe holds (call it
        when the pipe is readable). Raises EOFError when the child is gone."""
        chunk = os.read(self.conn.fileno(), 1 << 20)
        if not chunk:
            raise EOFError
        self._received += chunk
        return read_frames(self._received)

    def send(self, requests: list[AttemptRequest | CallbackRequest]) -> None:
        """Hand the child attempts; a child that cannot take them (it died, it closed its
        pipe) is marked broken, and the next ``collect`` replaces it."""
        try:
            self.conn.send(requests)
        except OSError:
            self.broken = True

    @property
    def job(self) -> Job | None:
        """The attempt running now (the first one not answered yet)."""
        return self.inbox[0] if self.inbox else None

    def kill(self, groups: Iterable[int] = ()) -> None:
        """Kill the child with the shell process groups of its attempt."""
        super().kill([*groups, *(self.job.pgids if self.job else ())])


def read_frames(received: bytearray) -> list[Any]:
    """Take every whole message off the front of ``received`` (bytes read from a pipe).

    The one place that reads ``multiprocessing.Connection.send``'s framing: a signed 4-byte
    big-endian length, or -1 and an 8-byte length for huge messages, then a pickle. Reading
    frames here, rather than with one ``recv`` and ``poll`` each, saves most of the pipe's
    cost per result; ``tests/runtime/test_attempt_pool.py`` checks it against ``Connection.send``.
    """
    found = []
    while len(received) >= 4:
        (size,) = struct.unpack_from("!i", received)
        start = 4
        if size == -1:
            if len(received) < 12:
                break
            (size,) = struct.unpack_from("!Q", received, 4)
            start = 12
        if len(received) < start + size:
            break
        found.append(pickle.loads(received[start : start + size]))
        del received[: start + size]
    return found


# ---------------------------------------------------------------- inside a child

#: Process groups of the attempt running in this child (its shells), killed if the worker
#: dies while they run.
_attempt_groups: list[int] = []


def _kill_attempt_groups() -> None:
    """The worker died (see ``processes.ForkedChild``): its attempt's shells go with it."""
    for pgid in _attempt_groups:
        processes.kill_group(pgid)


def load_runners() -> None:
    """Import what running an attempt takes: the runners and, behind them, the authoring
    API. A child forked while its worker has other threads must find them imported, since
    one of those threads may hold a module's import lock at the fork, and the child would
    wait on it forever; the worker imports them first, holding forks off meanwhile (a
    scheduler's thread forking a parse child mid-import would leave that child the same
    held lock). A child forked from a worker with no other thread (its first children: a
    run's driver forks them before starting any) imports them itself, beside the worker's
    own start, and the worker never needs them."""
    import dagrun.runtime.callback_runner
    import dagrun.runtime.runner  # noqa: F401


def child_main(conn: Connection, preload: Sequence[str] = ()) -> None:
    """A child: run attempts sent by the worker until told to stop (None) or the pipe ends.
    The DAG files in ``preload`` are imported first (see ``AttemptPool``)."""
    from dagrun.runtime.runner import DagCache  # see ``load_runners``

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The worker's console handlers write to fd 2, which is the attempt's log file while
    # an attempt runs: the runner's own handler already puts each record there once.
    logging.getLogger().handlers.clear()
    cache = DagCache()
    for path in preload:
        cache.preload(path)
    # What the child imported for itself lives as long as it does: out of the collector's
    # sight, as the worker's own modules are (``Worker.fork_children``).
    gc.freeze()
    while True:
        try:
            requests = conn.recv()
        except (EOFError, OSError):
            return
        if requests is None:
            return
        if isinstance(requests, Preload):
            for path in requests.paths:
                cache.preload(path)
            continue
        for request in requests:
            result = _attempt(request, cache, conn)
            try:
                conn.send(("done", result))
            except OSError:
                return


def _attempt(request: AttemptRequest | CallbackRequest, cache: DagCache, conn) -> AttemptResult:
    """One attempt (or callback event); whatever goes wrong around it becomes its result,
    never this child's end (the worker would only see a child that died)."""
    from dagrun.runtime.callback_runner import execute_callback
    from dagrun.runtime.runner import execute, one_line

    _attempt_groups.clear()

    def started_group(pgid: int) -> None:
        _attempt_groups.append(pgid)
        conn.send(("pgid", pgid))

    try:
        with processes.groups_reported_to(started_group):
            if isinstance(request, CallbackRequest):
                return execute_callback(request, cache)
            return execute(request, cache, started_group)
    except BaseException as exc:
        return AttemptResult(AttemptOutcome.CRASHED, f"worker child failed: {one_line(exc)}")
    finally:
        rendered.save()  # a child ends without exit handlers: keep what it rendered now


# ---------------------------------------------------------------- the worker's side

_spares: list[Child] = []


def prefork() -> None:
    """Fork a first child now, before this process imports the command that will run tasks
    (``cli.catalog``, for ``run`` and ``backfill`` on SQLite): the child imports the runners
    while its parent imports the rest, instead of after it, and the first ``AttemptPool``
    takes it (and has it import its DAG files: ``Preload``). Not for a store on
    PostgreSQL: children inherit the database clock's offset, measured when their worker
    starts (``Worker.fork_children``). Unused, it is killed at exit."""
    if not _spares:
        _spares.append(Child())
        atexit.register(_end_spares)


def _end_spares() -> None:
    """At exit, kill the child forked ahead that no pool took (the command ran nothing): an
    attempt child ignores the SIGTERM ``multiprocessing`` ends daemonic children with, and
    its exit handler would wait for it for good."""
    while _spares:
        child = _spares.pop()
        if child.parent == os.getpid():
            child.kill()


class AttemptPool:
    """``size`` children; hand them buffered jobs, collect results as they come."""

    def __init__(
        self,
        size: int,
        log_dir: str | None = None,
        stop_grace: float = 10.0,
        preload: Sequence[str] = (),
    ):
        """``preload``: DAG files each child imports as it starts, while the worker claims
        its first work (a run's driver knows its DAG's file), so the first attempt does
        not wait for the import."""
        self.size = size
        self.log_dir = log_dir
        self.stop_grace = stop_grace
        self.preload = preload
        self.children: list[Child] = []
        self._returned: list[Job] = []
        self._top_up()

    def busy(self) -> list[Child]:
        return [c for c in self.children if c.inbox]

    def running(self) -> list[tuple[Child, Job]]:
        """The busy children, each with the job it is running (the first of its inbox)."""
        return [(c, c.inbox[0]) for c in self.children if c.inbox]

    def jobs(self) -> list[Job]:
        """Every job a child holds: running or waiting in its inbox."""
        return [job for c in self.children for job in c.inbox]

    def waiting(self) -> int:
        """Jobs handed to children that have not started yet."""
        return sum(max(0, len(c.inbox) - 1) for c in self.children)

    def has_room(self, depth: int) -> bool:
        return any(len(c.inbox) < depth for c in self.children)

    def dispatch(self, buffer: deque[Job], depth: int) -> None:
        """Hand buffered jobs to children, one message each, keeping at most ``depth`` jobs
        per child; the buffer is shared out evenly so no child hoards what another could
        start now."""
        for child in sorted(self.children, key=lambda c: len(c.inbox)):
            if child.broken:
                continue
            share = -(-len(buffer) // self.size)
            jobs = batch(child.inbox, buffer, min(depth - len(child.inbox), share))
            if not jobs:
                continue
            if not child.inbox:
                jobs[0].started = time.monotonic()
            child.inbox.extend(jobs)
            child.send([job.request for job in jobs])

    def returned(self) -> list[Job]:
        """Jobs a dead child never started, for the worker to hand out again."""
        jobs, self._returned = self._returned, []
        return jobs

    def collect(self, timeout: float, wake: Sequence[int] = ()) -> list[tuple[Job, AttemptResult]]:
        """Wait up to ``timeout`` for results, or until one of the file descriptors ``wake``
        is readable; returns every attempt that ended."""
        finished: list[tuple[Job, AttemptResult]] = []
        for child in [c for c in self.children if c.broken]:
            finished.extend(self._drain_broken(child))
        self._top_up()
        busy = {c.conn.fileno(): c for c in self.busy()}
        poller = select.poll()
        for fd in [*busy, *wake]:
            poller.register(fd, select.POLLIN)
        for fd, _event in poller.poll(max(timeout, 0) * 1000 if not finished else 0):
            if fd in busy:
                finished.extend(self._drain(busy[fd]))
        finished.extend(self._kill_overdue())
        finished.extend(self._stop_taken())
        return finished

    def _drain_broken(self, child: Child) -> list[tuple[Job, AttemptResult]]:
        """A child that could not take new work: first what it sent before its pipe closed
        (the results of the attempts it finished), then its end. Without the first, the
        attempt it died in would be taken for one it had finished."""
        finished: list[tuple[Job, AttemptResult]] = []
        while child in self.children:
            if not select.select([child.conn.fileno()], [], [], 0)[0]:
                return finished + self._replace(child, _crash_reason(child))
            finished.extend(self._drain(child))
        return finished

    def _drain(self, child: Child) -> list[tuple[Job, AttemptResult]]:
        """Take what a ready child sent: process groups to remember, results; its death."""
        try:
            messages = child.messages()
        except (EOFError, OSError):
            return self._replace(child, _crash_reason(child))
        finished = []
        for kind, value in messages:
            if kind == "pgid" and child.job is not None:
                child.job.pgids.append(value)
            elif kind == "done":
                finished.append(self._finish(child, value))
        return finished

    @staticmethod
    def _finish(child: Child, result: AttemptResult) -> tuple[Job, AttemptResult]:
        """The running job ended; the next one in the inbox starts now."""
        job = child.inbox.popleft()
        job.ended = time.monotonic()
        if child.inbox:
            child.inbox[0].started = job.ended
        child.last_log = result.log or child.last_log
        return job, result

    def _kill_overdue(self) -> list[tuple[Job, AttemptResult]]:
        now = time.monotonic()
        ended = []
        for child, job in self.running():
            deadline = job.deadline
            if deadline is not None and now >= deadline:
                reason = f"timed out after {job.timeout:g} s ({job.timeout_name}); killed"
                ended.extend(self._replace(child, reason, AttemptOutcome.TIMED_OUT))
        return ended

    def _stop_taken(self) -> list[tuple[Job, AttemptResult]]:
        """Stop the running attempts an operator took away: its shell process groups get
        SIGTERM and ``stop_grace`` seconds to end (the attempt then ends on its own); a
        Python attempt, or one still running at the deadline, is killed with its child."""
        now = time.monotonic()
        ended = []
        for child, job in self.running():
            if not job.taken:
                continue
            if job.stop_deadline is None and job.pgids:
                for pgid in job.pgids:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(pgid, signal.SIGTERM)
                job.stop_deadline = now + self.stop_grace
            elif job.stop_deadline is None or now >= job.stop_deadline:
                reason = "stopped: its task instance was cancelled or marked by hand"
                ended.extend(self._replace(child, reason, AttemptOutcome.FAILED))
        return ended

    def next_deadline(self) -> float | None:
        running = [job for _, job in self.running()]
        deadlines = [
            d
            for job in running
            for d in (job.deadline, job.stop_deadline if job.taken else None)
            if d is not None
        ]
        if any(job.taken and job.stop_deadline is None for job in running):
            deadlines.append(0.0)  # a taken attempt not stopped yet: at once
        return min(deadlines) if deadlines else None

    def _replace(
        self, child: Child, reason: str, outcome: AttemptOutcome = AttemptOutcome.CRASHED
    ) -> list[tuple[Job, AttemptResult]]:
        """Kill ``child`` and fork a new one. Its running job ends with ``reason`` and the
        log the child wrote for it, or goes back unstarted if the child wrote nothing of
        it; the jobs waiting behind it go back unstarted."""
        child.kill()
        self.children.remove(child)
        self._top_up()
        if not child.inbox:
            log.warning("worker child %d %s; replaced", child.process.pid, reason)
            return []
        job = child.inbox.popleft()
        job.ended = time.monotonic()
        tail = None
        if self.log_dir is not None:
            assert child.process.pid is not None  # a Child starts its process at once
            tail = logfiles.tail_of(self.log_dir, child.process.pid, child.last_log)
        log.warning(
            "worker child %d %s during %s; replaced", child.process.pid, reason, job.request.label
        )
        started = self.log_dir is None or (tail is not None and tail.length > 0)
        if outcome == AttemptOutcome.CRASHED and not started:
            job.lost += 1
            if job.lost <= LOST_BEFORE_START_LIMIT:
                self._returned.extend([job, *child.inbox])
                return []
            outcome = AttemptOutcome.INFRA_FAILED
            reason = f"worker children died before the attempt started: {reason}"
        self._returned.extend(child.inbox)
        return [(job, AttemptResult(outcome, reason, None, job.ended - job.started, tail))]

    def _top_up(self) -> None:
        """Fork children until there are ``size`` (taking the one ``prefork`` started, if
        any); a fork that fails (no memory, no processes left) is logged and tried again at
        the next collect."""
        while len(self.children) < self.size:
            try:
                self.children.append(self._spare() or Child(self.preload))
            except OSError as exc:
                log.warning("cannot start a worker child, will try again: %s", exc)
                return

    def _spare(self) -> Child | None:
        """The child ``prefork`` started, told to import this pool's DAG files; None if this
        process forked none (or it died)."""
        while _spares:
            child = _spares.pop()
            if child.parent != os.getpid():
                continue  # a forked copy of the list: not this process's child
            if child.process.is_alive():
                if self.preload:
                    child.conn.send(Preload(tuple(self.preload)))
                return child
            child.kill()  # reaped, its pipe closed
        return None

    def kill_busy(self) -> list[Job]:
        """Kill every child that holds jobs (shutdown past the grace period); their jobs."""
        jobs: list[Job] = []
        for child in self.busy():
            jobs.extend(child.inbox)
            child.kill()
            self.children.remove(child)
        return jobs

    def close(self) -> None:
        for child in self.children:
            if not child.inbox:
                with contextlib.suppress(OSError):
                    child.conn.send(None)
        for child in self.children:
            child.process.join(2)
            if child.process.is_alive() or child.inbox:
                child.kill()
        self.children = []


def batch(held: Sequence[Job], buffer: deque[Job], limit: int) -> list[Job]:
    """The next jobs from ``buffer`` for a child that holds ``held``: at most ``limit``, and
    a job waits behind others only if every one of them is known to be short. A long or new
    task must not hold up the jobs queued behind it while another child could run them."""
    jobs: list[Job] = []
    while buffer and len(jobs) < limit:
        if (held or jobs) and not all(job.short for job in (*held, *jobs)):
            break
        jobs.append(buffer.popleft())
    return jobs


def _crash_reason(child: Child) -> str:
    return f"{child.exit_reason()} before finishing"

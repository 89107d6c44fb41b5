"""A pool of reusable child processes that run attempts, each child one at a time.

Children are forked once and reused, so an attempt costs a pipe message rather than an
interpreter start. The worker may hand a child several short attempts in one message (its
inbox): the child runs them in order and answers each, so a small task costs a fraction of
a round trip. Only the first attempt of an inbox is running; its deadline starts when the
one before it ends. A child that dies (``os._exit``, a signal, a segfault) fails only the
attempt it was running, with the reason, and is replaced; the attempts still waiting in its
inbox go back to the worker untouched. A timed-out attempt is killed with its child and any
shell process group it started.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import pickle
import select
import signal
import struct
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from dagrun import logfiles
from dagrun.logfiles import LogRange
from dagrun.runner import AttemptRequest, AttemptResult, DagCache, execute
from dagrun.states import AttemptOutcome

_FORK = multiprocessing.get_context("fork")


@dataclass
class Job:
    """An attempt handed to a child, with what the worker needs to record its end."""

    request: AttemptRequest
    timeout: float | None
    payload: Any = None
    started: float = 0.0
    ended: float = 0.0
    pgids: list[int] = field(default_factory=list)
    short: bool = False  # its task ran briefly before, so others may wait behind it

    @property
    def deadline(self) -> float | None:
        return self.started + self.timeout if self.timeout else None


class Child:
    def __init__(self) -> None:
        self.conn, child_end = _FORK.Pipe()
        self.process = _FORK.Process(target=_child_entry, args=(child_end,), daemon=True)
        self.process.start()
        child_end.close()
        self.inbox: deque[Job] = deque()
        self.last_log: LogRange | None = None
        self._received = bytearray()

    def messages(self) -> list[Any]:
        """The messages that arrived whole, after one read of what the pipe holds (call it
        when the pipe is readable). Reading the frames here rather than with one
        ``Connection.recv`` and ``poll`` each saves most of the pipe's cost per result.
        Raises EOFError when the child is gone."""
        chunk = os.read(self.conn.fileno(), 1 << 20)
        if not chunk:
            raise EOFError
        self._received += chunk
        found = []
        while (frame := _frame(self._received)) is not None:
            start, end = frame
            found.append(pickle.loads(self._received[start:end]))
            del self._received[:end]
        return found

    @property
    def job(self) -> Job | None:
        """The attempt running now (the first one not answered yet)."""
        return self.inbox[0] if self.inbox else None

    def kill(self) -> None:
        """Kill the child, its process group and any shell process group of its attempt."""
        pids = [self.process.pid] + (self.job.pgids if self.job else [])
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError, TypeError):
                os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, TypeError):
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.join(5)
        self.conn.close()


def _child_entry(conn: Connection) -> None:
    os.setpgrp()
    _die_with_parent()
    child_main(conn)


def child_main(conn) -> None:
    """A pool child: run attempts sent by the worker until told to stop (None)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    # The worker's console handlers write to fd 2, which is the attempt's log file while
    # an attempt runs: the runner's own handler already puts each record there once.
    logging.getLogger().handlers.clear()
    cache = DagCache()
    while True:
        try:
            requests = conn.recv()
        except EOFError:
            return
        if requests is None:
            return
        for request in requests:
            result = execute(request, cache, lambda pgid: conn.send(("pgid", pgid)))
            conn.send(("done", result))


def _die_with_parent() -> None:
    """Linux: the kernel kills this child if its worker dies, so no orphan runs on."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Pool:
    """``size`` children; hand them buffered jobs, collect results as they come."""

    def __init__(self, size: int, log_dir: str | None = None):
        self.size = size
        self.log_dir = log_dir
        self.children = [Child() for _ in range(size)]
        self._returned: list[Job] = []

    def busy(self) -> list[Child]:
        return [c for c in self.children if c.inbox]

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
            share = -(-len(buffer) // self.size)
            jobs = batch(child.inbox, buffer, min(depth - len(child.inbox), share))
            if not jobs:
                continue
            if not child.inbox:
                jobs[0].started = time.monotonic()
            child.inbox.extend(jobs)
            child.conn.send([job.request for job in jobs])

    def returned(self) -> list[Job]:
        """Jobs a dead child never started, for the worker to hand out again."""
        jobs, self._returned = self._returned, []
        return jobs

    def collect(self, timeout: float, wake: int | None = None) -> list[tuple[Job, AttemptResult]]:
        """Wait up to ``timeout`` for results, or until the file descriptor ``wake`` is
        readable (the worker's listener); returns every attempt that ended."""
        busy = {c.conn.fileno(): c for c in self.busy()}
        poller = select.poll()
        for fd in [*busy, *([wake] if wake is not None else [])]:
            poller.register(fd, select.POLLIN)
        finished: list[tuple[Job, AttemptResult]] = []
        for fd, _event in poller.poll(max(timeout, 0) * 1000):
            if fd in busy:
                finished.extend(self._drain(busy[fd]))
        finished.extend(self._kill_overdue())
        return finished

    def _drain(self, child: Child) -> list[tuple[Job, AttemptResult]]:
        """Take what a ready child sent: process groups to remember, results; its death."""
        try:
            messages = child.messages()
        except (EOFError, OSError):
            return [self._replace(child, _crash_reason(child))]
        finished = []
        for kind, value in messages:
            if kind == "pgid":
                child.job.pgids.append(value)
            else:
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
        for child in self.busy():
            deadline = child.job.deadline
            if deadline is not None and now >= deadline:
                reason = f"timed out after {child.job.timeout:g} s (execution_timeout); killed"
                ended.append(self._replace(child, reason, AttemptOutcome.TIMED_OUT))
        return ended

    def next_deadline(self) -> float | None:
        deadlines = [c.job.deadline for c in self.busy() if c.job.deadline is not None]
        return min(deadlines) if deadlines else None

    def _replace(
        self, child: Child, reason: str, outcome: AttemptOutcome = AttemptOutcome.CRASHED
    ) -> tuple[Job, AttemptResult]:
        """Kill ``child`` and fork a new one; its running job ends with ``reason`` and the
        log the child wrote for it, the jobs waiting behind it go back unstarted."""
        child.kill()
        job = child.inbox.popleft()
        job.ended = time.monotonic()
        self._returned.extend(child.inbox)
        self.children[self.children.index(child)] = Child()
        log = None
        if self.log_dir is not None:
            log = logfiles.tail_of(self.log_dir, child.process.pid, child.last_log)
        return job, AttemptResult(outcome, reason, None, job.ended - job.started, log)

    def kill_busy(self) -> list[Job]:
        """Kill every child that holds jobs (shutdown past the grace period); their jobs."""
        jobs = []
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
            if child.process.is_alive():
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


def _frame(data: bytearray) -> tuple[int, int] | None:
    """Where the first whole message of ``Connection.send``'s framing lies in ``data`` (a
    signed 4-byte length, or -1 and an 8-byte one for huge messages); None if incomplete."""
    if len(data) < 4:
        return None
    (size,) = struct.unpack_from("!i", data)
    start = 4
    if size == -1:
        if len(data) < 12:
            return None
        (size,) = struct.unpack_from("!Q", data, 4)
        start = 12
    end = start + size
    return (start, end) if len(data) >= end else None


def _crash_reason(child: Child) -> str:
    child.process.join(2)
    code = child.process.exitcode
    if code is None:
        return "worker child stopped answering"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "unknown"
        return f"killed by signal {-code} ({name})"
    return f"process exited with code {code} before finishing"

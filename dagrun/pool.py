"""A pool of reusable child processes that run attempts, one at a time each.

Children are forked once and reused, so an attempt costs a pipe round trip rather than an
interpreter start. A child that dies (``os._exit``, a signal, a segfault) fails only the
attempt it was running, with the reason, and is replaced. A timed-out attempt is killed
with its child and any shell process group it started.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

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

    @property
    def deadline(self) -> float | None:
        return self.started + self.timeout if self.timeout else None


class Child:
    def __init__(self) -> None:
        self.conn, child_end = _FORK.Pipe()
        self.process = _FORK.Process(target=_child_entry, args=(child_end,), daemon=True)
        self.process.start()
        child_end.close()
        self.job: Job | None = None

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
    cache = DagCache()
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        if request is None:
            return
        result = execute(request, cache, lambda pgid: conn.send(("pgid", pgid)))
        conn.send(("done", result))


def _die_with_parent() -> None:
    """Linux: the kernel kills this child if its worker dies, so no orphan runs on."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Pool:
    """``size`` children; dispatch to an idle one, collect results as they come."""

    def __init__(self, size: int):
        self.size = size
        self.children = [Child() for _ in range(size)]

    def idle(self) -> list[Child]:
        return [c for c in self.children if c.job is None]

    def busy(self) -> list[Child]:
        return [c for c in self.children if c.job is not None]

    def dispatch(self, child: Child, job: Job) -> None:
        job.started = time.monotonic()
        child.job = job
        child.conn.send(job.request)

    def collect(self, timeout: float) -> list[tuple[Job, AttemptResult]]:
        """Wait up to ``timeout`` for results; returns every attempt that ended."""
        busy = {c.conn: c for c in self.busy()}
        finished: list[tuple[Job, AttemptResult]] = []
        if not busy:
            time.sleep(max(timeout, 0))
            return finished
        for conn in wait(list(busy), timeout=max(timeout, 0)):
            finished.extend(self._drain(busy[conn]))
        finished.extend(self._kill_overdue())
        return finished

    def _drain(self, child: Child) -> list[tuple[Job, AttemptResult]]:
        """Read what a ready child sent: a process group to remember, or its result."""
        while True:
            try:
                kind, value = child.conn.recv()
            except (EOFError, OSError):
                return [self._replace(child, _crash_reason(child))]
            if kind == "pgid":
                child.job.pgids.append(value)
                if not child.conn.poll():
                    return []
                continue
            job, child.job = child.job, None
            job.ended = time.monotonic()
            return [(job, value)]

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
        job = child.job
        job.ended = time.monotonic()
        child.kill()
        self.children[self.children.index(child)] = Child()
        return job, AttemptResult(outcome, reason, None, time.monotonic() - job.started)

    def kill_busy(self) -> list[Job]:
        """Kill every child that is running an attempt (shutdown past the grace period)."""
        jobs = []
        for child in self.busy():
            jobs.append(child.job)
            child.kill()
            self.children.remove(child)
        return jobs

    def close(self) -> None:
        for child in self.children:
            if child.job is None:
                with contextlib.suppress(OSError):
                    child.conn.send(None)
        for child in self.children:
            child.process.join(2)
            if child.process.is_alive():
                child.kill()
        self.children = []


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

"""Process-tree hygiene: nothing dagrun starts outlives the process that started it, and no
child is forked holding a lock it will never get back.

Every child dagrun forks (attempt children, parse children) and every command an attempt
runs (a BashTask's shell) asks the kernel to signal it when its parent dies
(``PR_SET_PDEATHSIG``, Linux), and each lives in a process group of its own, so whatever
it starts in turn can be killed with it as one group.

A fork copies one thread and every lock, held or not. A worker forks a new child while its
lease thread, or a backfill's watching thread, may be inside a database call, holding
SQLite's (or libpq's) internal mutexes: the child would then hang the first time it opens
the database (a fenced partition write). So database work and forking exclude each other
(``FORK_GUARD``): transactions share it, a fork takes it alone, for milliseconds.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import threading
from collections.abc import Callable, Iterator

_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGKILL, parent: int | None = None) -> None:
    """Have the kernel send ``sig`` to this process when its parent dies; if the parent
    ``parent`` (its pid before the fork) died already, exit at once. No-op off Linux."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(sig))
    if parent is not None and os.getppid() != parent:
        os._exit(1)


def kill_group(pgid: int | None) -> None:
    """SIGKILL a process group, if it still has members."""
    if pgid:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


def own_session() -> None:
    """For ``subprocess.Popen(preexec_fn=...)``: a session (so a process group) of its
    own, killed by the kernel when the process that started it dies."""
    os.setsid()
    die_with_parent()


#: Told of each process group started by the work running in this process (a worker
#: child's callback: a notifier's command), so it is killed with the child.
_group_listener: Callable[[int], None] | None = None


def report_group(pgid: int) -> None:
    """Say that the work running now started process group ``pgid``: if that work is
    killed (its time limit, its worker gone), the group goes with it."""
    if _group_listener is not None:
        _group_listener(pgid)


@contextlib.contextmanager
def groups_reported_to(listener: Callable[[int], None]) -> Iterator[None]:
    """Send ``report_group`` calls to ``listener`` while the block runs."""
    global _group_listener
    saved, _group_listener = _group_listener, listener
    try:
        yield
    finally:
        _group_listener = saved


class ForkGuard:
    """Many users at once (database transactions), or one fork alone. A fork that waits
    goes first: new users wait behind it, so a busy thread cannot hold forks off."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._users = 0
        self._forks = 0  # waiting or forking

    @contextlib.contextmanager
    def using(self) -> Iterator[None]:
        with self._cond:
            while self._forks:
                self._cond.wait()
            self._users += 1
        try:
            yield
        finally:
            with self._cond:
                self._users -= 1
                if not self._users:
                    self._cond.notify_all()

    @contextlib.contextmanager
    def forking(self) -> Iterator[None]:
        with self._cond:
            self._forks += 1
            while self._users:
                self._cond.wait()
        try:
            yield
        finally:
            with self._cond:
                self._forks -= 1
                self._cond.notify_all()


FORK_GUARD = ForkGuard()


def _reset_guard_in_child() -> None:
    """A forked child starts with a guard of its own (the parent's may be mid-use)."""
    global FORK_GUARD
    FORK_GUARD = ForkGuard()


os.register_at_fork(after_in_child=_reset_guard_in_child)

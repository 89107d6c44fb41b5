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

``ForkedChild`` is the one way dagrun forks a child that it talks to over a pipe, so
every such child (attempt children, parse children) gets all of the above.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

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


# ---------------------------------------------------------------- forked children


@functools.cache
def _fork() -> Any:
    """The fork context (``multiprocessing`` is imported by the commands that fork)."""
    import multiprocessing

    return multiprocessing.get_context("fork")


def describe_exit(code: int | None) -> str:
    """How a child ended, from its exit code (negative: the signal that killed it; None: it
    has not ended)."""
    if code is None:
        return "stopped answering"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "unknown"
        return f"killed by signal {-code} ({name})"
    return f"exited with code {code}"


class ForkedChild:
    """A child process forked to run ``target(conn, *args)``, ``conn`` being its end of a
    duplex pipe whose other end is ``self.conn``.

    The fork takes ``FORK_GUARD`` alone. The child closes the parent's end of the pipe (so
    its reads end when the parent's end closes), leads a process group of its own, dies with
    its parent, and writes through fresh ``sys.stdout``/``sys.stderr`` on fds 1 and 2 (another
    thread may have held the old streams' locks at the fork, and they would stay held).

    When the parent dies the kernel SIGKILLs the child. A child given ``on_parent_death``
    gets SIGTERM instead: it runs ``on_parent_death`` (to kill what it started in groups of
    their own), kills its own group and exits. A SIGTERM while the parent lives is ignored:
    the parent stops its children itself (``kill``).
    """

    def __init__(
        self,
        target: Callable[..., object],
        args: tuple = (),
        on_parent_death: Callable[[], object] | None = None,
    ) -> None:
        self.parent = os.getpid()  # the process that forked it, the only one that may use it
        self.conn, child_end = _fork().Pipe()
        self.process = _fork().Process(
            target=_run_forked,
            args=(target, args, child_end, self.conn, self.parent, on_parent_death),
            daemon=True,
        )
        try:
            with FORK_GUARD.forking():  # no other thread is inside the database
                self.process.start()
        except BaseException:
            self.conn.close()
            raise
        finally:
            child_end.close()

    def kill(self, groups: Iterable[int] = ()) -> None:
        """SIGKILL the child's process group, the groups ``groups`` (what it started in groups
        of their own) and the child itself (it may not lead its group yet); reap it and close
        the pipe."""
        for pgid in (self.process.pid, *groups):
            kill_group(pgid)
        self.process.kill()
        self.process.join(5)
        self.conn.close()

    def exit_reason(self, wait: float = 2.0) -> str:
        """How the child ended (``describe_exit``), once it has, waiting up to ``wait`` s."""
        self.process.join(wait)
        return describe_exit(self.process.exitcode)


def _run_forked(
    target: Callable[..., object],
    args: tuple,
    conn: Connection,
    parent_end: Connection,
    parent: int,
    on_parent_death: Callable[[], object] | None,
) -> None:
    """Inside a ``ForkedChild``: set the child up, then run its target."""
    parent_end.close()
    os.setpgrp()
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - lives on
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115 - lives on
    if on_parent_death is None:
        die_with_parent(signal.SIGKILL, parent)
    else:
        signal.signal(signal.SIGTERM, lambda *_: _parent_gone(parent, on_parent_death))
        die_with_parent(signal.SIGTERM, parent)
    target(conn, *args)


def _parent_gone(parent: int, on_parent_death: Callable[[], object]) -> None:
    """SIGTERM in a child given ``on_parent_death``: the kernel's word that its parent
    died (``PR_SET_PDEATHSIG``), unless the parent is still there."""
    if os.getppid() == parent:
        return
    on_parent_death()
    kill_group(os.getpgrp())
    os._exit(1)


# ---------------------------------------------------------------- ending a command


class Ending:
    """The exit code a command's process ends with (``end_without_teardown``)."""

    def __init__(self) -> None:
        self.code = 1  # an exception that escaped the command: Python's own exit code


def end_without_teardown() -> Ending:
    """Have this process end, once its threads are joined and its exit handlers have run, by
    ``os._exit``: the interpreter's teardown (clearing hundreds of modules, a last garbage
    collection of everything a command loaded) is a tenth of a short command's time and
    frees nothing the kernel does not. Call it first thing: exit handlers registered after
    it run before it, as Python runs them in reverse; of those registered before (at
    import), logging's is the one there is, and it is run here. Output streams are flushed,
    as the teardown would. The caller sets the returned ``Ending``'s code."""
    ending = Ending()
    import atexit
    import logging

    def end() -> None:
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed pipe (`dagrun ... | head`), as Python
                ending.code = ending.code or 120
        os._exit(ending.code)

    atexit.register(end)
    return ending

"""Process-tree hygiene: nothing dagrun starts outlives the process that started it.

Every child dagrun forks (attempt children, parse children) and every command an attempt
runs (a BashTask's shell) asks the kernel to signal it when its parent dies
(``PR_SET_PDEATHSIG``, Linux), and each lives in a process group of its own, so whatever
it starts in turn can be killed with it as one group.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal

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

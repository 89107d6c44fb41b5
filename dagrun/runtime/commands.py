"""Commands an attempt runs beside its own process: each in a process group of its own,
reported to the attempt's child (``on_process_group``) so that a timeout, a cancel or the
worker's end takes the whole group along; their output in the attempt's log, masked once a
secret is known (``dagrun.runtime.masking``).

A module of its own because more than one kind of task runs commands: a virtual
environment's installer and a function called in another interpreter
(``dagrun.runtime.virtualenvs``) as a BashTask's shell does.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence

from dagrun import processes
from dagrun.runtime import masking

#: Told the process group of each command started, by the attempt's child.
GroupListener = Callable[[int], None]


def run_command(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str | None = None,
    on_process_group: GroupListener | None = None,
    tail: masking.Tail | None = None,
    stdin: int | None = None,
) -> int:
    """Run ``argv`` to its end, its output into the log (and into ``tail``); returns its
    exit code (negative: the signal that killed it). Its group is told to
    ``on_process_group``, else to whatever listens for the work running now
    (``processes.report_group``). Whatever it still runs when this returns early (an
    exception, the attempt stopped) is killed with its group."""
    sys.stdout.flush()
    sys.stderr.flush()
    masker = masking.active()
    process = subprocess.Popen(
        list(argv),
        env=dict(env),
        cwd=cwd,
        stdin=stdin,
        preexec_fn=processes.own_session,
        **masking.piped(masker if tail is None else masker or masking.Masker()),
    )
    (on_process_group or processes.report_group)(process.pid)
    try:
        if masker or tail:
            masking.pump(process, masker or masking.Masker(), tail=tail)
        return process.wait()
    finally:
        _end(process)


def run_captured(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    on_process_group: GroupListener | None = None,
    keep: int = 20,
) -> tuple[int, list[str]]:
    """As ``run_command``, and also keep the last ``keep`` lines of its output (an
    installer's, whose last lines say why it failed)."""
    tail = masking.Tail()
    code = run_command(
        argv, env=env, on_process_group=on_process_group, tail=tail, stdin=subprocess.DEVNULL
    )
    return code, tail.last_lines(keep)


def _end(process: subprocess.Popen) -> None:
    """Kill the command's group if it still runs, and close its pipe."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    if process.stdout is not None:
        process.stdout.close()

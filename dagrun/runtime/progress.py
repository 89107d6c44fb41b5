"""A one-line progress display for long operations (backfill): bar, counts, elapsed, rate.

On a terminal the line redraws in place behind a bar; elsewhere (CI logs, pipes) a plain line
of counts, without the bar, is printed every few seconds so a long job still shows it is
alive.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from dagrun.states import FINISHED_TASK_STATES, RunState


class Progress:
    def __init__(
        self, total_runs: int, total_tasks: int, stream: TextIO | None = None, every: float = 5.0
    ):
        self.total = total_runs
        self.total_tasks = total_tasks
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.every = every
        self.started = time.monotonic()
        self._last_line = 0.0

    def due(self) -> bool:
        """Whether a new line is worth its queries: a few redraws a second on a terminal."""
        every = 0.25 if self.tty else self.every
        return time.monotonic() - self._last_line >= every

    def update(self, summary) -> None:
        now = time.monotonic()
        self._last_line = now
        line = self.render(summary, now - self.started)
        if self.tty:
            self.stream.write("\r\033[K" + line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def render(self, summary, elapsed: float) -> str:
        """The counts, behind a bar on a terminal only: a bar that redraws in place shows
        movement, but in a log file it is only noise on every line."""
        runs, tasks = summary.runs, summary.tasks
        ok, failed = runs.get(RunState.SUCCESS, 0), runs.get(RunState.FAILED, 0)
        done_tasks = sum(n for s, n in tasks.items() if s in FINISHED_TASK_STATES)
        total_tasks = max(self.total_tasks, sum(tasks.values()))
        rate = done_tasks / elapsed if elapsed > 0 else 0.0
        counts = (
            f"runs {ok + failed}/{self.total} (ok {ok}, failed {failed})  "
            f"tasks {done_tasks}/{total_tasks}  {elapsed:.1f}s  {rate:.1f} tasks/s"
        )
        return f"{self._bar(ok + failed)} {counts}" if self.tty else counts

    def _bar(self, done_runs: int, width: int = 24) -> str:
        filled = int(width * done_runs / self.total) if self.total else width
        return f"[{'#' * filled}{'.' * (width - filled)}]"

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()

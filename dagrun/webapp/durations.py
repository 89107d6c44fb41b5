"""Durations over time: the last N runs of a DAG, how long each took and each of its tasks,
as one SVG chart, so a task slowly getting slower shows at a glance.

Laid out here in pixels (the template only prints numbers into SVG attributes: the CSP
forbids ``style=``). x is the run, oldest left, evenly spaced; y is seconds from zero.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

from dagrun.store import Store
from dagrun.store.history import RunDurations, recent_durations
from dagrun.webapp.formatting import fmt_duration
from dagrun.webapp.gantt import NICE_STEPS, Tick, nice_step
from dagrun.webapp.http import BadRequest
from dagrun.webapp.models import DagInfo, read_dag, task_order

DEFAULT_RUNS = 25
MAX_RUNS = 200
LEFT = 70
TOP = 10
PLOT_WIDTH = 880
PLOT_HEIGHT = 300
BOTTOM = 40
Y_TICKS = 5
X_LABELS = 10
#: Task colours: classes ``dc0``..``dc9`` of the stylesheet, reused in turn.
PALETTE = 10
#: The latest duration is flagged when it is this many times the median or more...
SLOWER_RATIO = 1.5
#: ...and the median rests on at least this many runs...
MIN_SAMPLES = 3
#: ...and the latest took at least this many seconds more: 0.004 s against 0.002 s is
#: twice the median, and noise (both show as 0.00s).
SLOWER_FLOOR = 0.1
#: Durations under a second need steps under a second.
_STEPS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, *NICE_STEPS)


@dataclass(frozen=True)
class Point:
    """A point of the durations chart, with its hover text."""

    x: float
    y: float
    title: str


@dataclass(frozen=True)
class Line:
    """The run's duration or one task's across the runs, with how its latest compares."""

    name: str
    css: str
    points: list[Point]
    median: float
    latest: float

    @property
    def slower(self) -> bool:
        """Whether the latest run took much longer than usual (and usual is known), by
        more than a blink."""
        return (
            len(self.points) >= MIN_SAMPLES
            and self.latest > SLOWER_RATIO * self.median > 0
            and self.latest - self.median >= SLOWER_FLOOR
        )

    @property
    def ratio(self) -> float | None:
        """The latest over the median (None when the median is zero)."""
        return self.latest / self.median if self.median else None

    @property
    def polyline(self) -> str:
        return " ".join(f"{p.x},{p.y}" for p in self.points)

    @property
    def title(self) -> str:
        marker = " · much slower than usual" if self.slower else ""
        return (
            f"{self.name}: median {fmt_duration(self.median)}, "
            f"latest {fmt_duration(self.latest)}{marker}"
        )


@dataclass(frozen=True)
class DurationsChart:
    """Everything the durations page prints, read in one transaction and laid out after."""

    dag: DagInfo
    runs: int
    asked: int
    run_line: Line | None
    task_lines: list[Line]
    y_ticks: list[Tick]
    x_labels: list[Tick]

    left = LEFT
    top = TOP
    right = LEFT + PLOT_WIDTH
    bottom = TOP + PLOT_HEIGHT
    width = LEFT + PLOT_WIDTH + 50  # room for the newest date, centred on the last run
    height = TOP + PLOT_HEIGHT + BOTTOM

    @property
    def lines(self) -> list[Line]:
        return ([self.run_line] if self.run_line else []) + self.task_lines


def runs_param(value: str | None) -> int:
    """``?runs=N``: how many of the latest runs to chart; bad values are a 400."""
    if value is None or value == "":
        return DEFAULT_RUNS
    if not re.fullmatch(r"[0-9]{1,6}", value):
        raise BadRequest(f"runs must be a whole number from 1 to {MAX_RUNS}")
    return min(max(int(value), 1), MAX_RUNS)


def read_durations(store: Store, dag_id: str, runs: int) -> DurationsChart:
    with store.read() as conn:
        info = read_dag(store, conn, dag_id)
        history = recent_durations(conn, dag_id, runs)
    return build_chart(info, history, runs)


def build_chart(info: DagInfo, history: Sequence[RunDurations], asked: int) -> DurationsChart:
    """The chart of ``history`` (oldest first): a line for the run, one per task."""
    tz = info.spec.timetable.tz
    xs = _xs(len(history))
    top = max(
        [r.duration or 0.0 for r in history] + [s for r in history for s in r.tasks.values()],
        default=0.0,
    )
    step = nice_step(top or 1.0, Y_TICKS, _STEPS)
    y_max = step * max(1, math.ceil(top / step))
    place = _Placer(history, xs, y_max, tz)
    run_line = place.line("run", "run", [r.duration for r in history])
    seen = {task_id for r in history for task_id in r.tasks}
    task_lines = [
        place.line(task_id, f"task dc{i % PALETTE}", [r.tasks.get(task_id) for r in history])
        for i, (task_id, _) in enumerate(task_order(info, seen))
    ]
    y_ticks = [
        Tick(_y(i * step, y_max), fmt_duration(i * step)) for i in range(round(y_max / step) + 1)
    ]
    return DurationsChart(
        info,
        len(history),
        asked,
        run_line,
        [line for line in task_lines if line is not None],
        y_ticks,
        _x_labels(history, xs, tz),
    )


def _xs(count: int) -> list[float]:
    if count == 1:
        return [LEFT + PLOT_WIDTH / 2]
    gap = PLOT_WIDTH / max(1, count - 1)
    return [round(LEFT + i * gap, 1) for i in range(count)]


def _y(seconds: float, y_max: float) -> float:
    return round(TOP + PLOT_HEIGHT - seconds / y_max * PLOT_HEIGHT, 1)


class _Placer:
    """Values of one series to points on the chart, titled with the run they belong to."""

    def __init__(
        self, history: Sequence[RunDurations], xs: list[float], y_max: float, tz: ZoneInfo
    ):
        self.history = history
        self.xs = xs
        self.y_max = y_max
        self.dates = [_date(r.logical_date, tz) for r in history]

    def line(self, name: str, css: str, values: list[float | None]) -> Line | None:
        """The series as a line through the runs that have a value; None if none has."""
        found = [(i, v) for i, v in enumerate(values) if v is not None]
        if not found:
            return None
        points = [
            Point(
                self.xs[i],
                _y(v, self.y_max),
                f"{name} · {self.dates[i]} ({self.history[i].run_id}) · {fmt_duration(v)}",
            )
            for i, v in found
        ]
        seconds = [v for _, v in found]
        return Line(name, css, points, statistics.median(seconds), seconds[-1])


def _date(at: datetime, tz: ZoneInfo) -> str:
    local = at.astimezone(tz)
    return local.strftime("%Y-%m-%d" if local.time() == datetime.min.time() else "%Y-%m-%d %H:%M")


def _x_labels(history: Sequence[RunDurations], xs: list[float], tz: ZoneInfo) -> list[Tick]:
    """At most ``X_LABELS`` logical dates under the axis, evenly spread, newest included."""
    every = max(1, math.ceil(len(history) / X_LABELS))
    chosen = range(len(history) - 1, -1, -every)
    return [Tick(xs[i], _date(history[i].logical_date, tz)) for i in sorted(chosen)]

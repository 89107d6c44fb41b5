"""The Gantt of a run: a row per task instance on a time axis, laid out here in pixels so
the template only prints numbers into SVG attributes (the CSP forbids ``style=``).

A row holds the instance's wait (queued until started, hatched), a lighter bar per earlier
try and a bar for its current try (running ones reach to now). A state set without a try
(by hand) has no bar of its own, only a hollow mark where it was set. The critical path is
the chain of instances that decided when the run ended: from the instance that ended last,
back through the upstream instance that ended latest (the one that released it) to a root;
a state set by hand ran for no time, so it is never on it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from dagrun.states import AttemptOutcome, RunState, TaskState
from dagrun.store import Store, run_reads, task_reads
from dagrun.store.run_reads import RunRow
from dagrun.store.task_reads import AttemptRow, TaskRow
from dagrun.webapp.formatting import fmt_duration, local
from dagrun.webapp.models import DagInfo, read_dag
from dagrun.webapp.urls import log_url

LABEL_WIDTH = 260
CHART_WIDTH = 760
AXIS_HEIGHT = 26
ROW_HEIGHT = 18
BAR_HEIGHT = 12
LABEL_CHARS = 40
MAX_TICKS = 8
#: A run of quick tasks spans a second or less: its axis counts tenths, down to thousandths.
_SUBSECOND = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5)
#: The shortest span an axis covers: a run whose every time is one instant still has a scale.
MIN_SPAN = timedelta(milliseconds=1)
#: Axis steps a reader counts in without effort, in seconds: 1 s up to a week.
NICE_STEPS = (
    *(1, 2, 5, 10, 15, 30),
    *(60 * m for m in (1, 2, 5, 10, 15, 30)),
    *(3600 * h for h in (1, 2, 3, 6, 12)),
    *(86400 * d for d in (1, 2, 7)),
)


@dataclass(frozen=True)
class Bar:
    """One rectangle of a row: a try (current or earlier) or the wait before the current."""

    x: float
    width: float
    state: str
    title: str
    href: str | None = None
    earlier: bool = False
    critical: bool = False
    #: A mark where a state was set without a try (by hand), rather than decided.
    hand: bool = False


@dataclass(frozen=True)
class Row:
    """One task instance's row of the Gantt chart."""

    label: str
    state: str
    y: float
    wait: Bar | None
    bars: list[Bar]
    critical: bool
    #: Where an instance that never ran (skipped, upstream failed) was decided, or where
    #: its state was set by hand.
    mark: Bar | None = None

    @property
    def short_label(self) -> str:
        """The label cut to what fits left of the chart; its title keeps it whole."""
        return self.label if len(self.label) <= LABEL_CHARS else self.label[: LABEL_CHARS - 1] + "…"

    @property
    def bar_y(self) -> float:
        return self.y + (ROW_HEIGHT - BAR_HEIGHT) / 2

    @property
    def text_y(self) -> float:
        return self.y + ROW_HEIGHT - 5


@dataclass(frozen=True)
class Tick:
    """A labelled mark on an axis, ``at`` pixels along it (the Gantt's time axis, the
    durations chart's axes)."""

    at: float
    label: str


@dataclass(frozen=True)
class Gantt:
    """Everything the Gantt page prints, read in one transaction and laid out after it."""

    dag: DagInfo
    run: RunRow
    rows: list[Row]
    ticks: list[Tick]
    critical: list[str]
    width: int
    height: int

    label_x = LABEL_WIDTH - 8
    bar_height = BAR_HEIGHT
    row_height = ROW_HEIGHT


# ---------------------------------------------------------------- reading


def read_gantt(store: Store, dag_id: str, run_id: str) -> Gantt:
    """Read the run inside one read transaction, lay it out after it ends (no lock held)."""
    with store.read() as conn:
        now = store.now(conn)
        info = read_dag(store, conn, dag_id)
        run = run_reads.run_by_id(conn, dag_id, run_id)
        order = [t.task_id for t in info.spec.tasks]
        instances = task_reads.task_instances(conn, [run.id], order)
        attempts = task_reads.run_attempts(conn, run.id)
    return build_gantt(info, run, instances, attempts, now)


# ---------------------------------------------------------------- laying out


def build_gantt(
    info: DagInfo,
    run: RunRow,
    instances: Sequence[TaskRow],
    attempts: Mapping[int, list[AttemptRow]],
    now: datetime,
) -> Gantt:
    """The rows and axis of a run's Gantt (pure: ``now`` is where running bars end)."""
    upstream = {t.task_id: t.upstream for t in info.spec.tasks}
    chain = critical_path(instances, upstream, now)
    on_path = {ti.id for ti in chain}
    start, end = _window(run, instances, attempts, now)
    scale = TimeScale(start, end)
    tz = info.spec.timetable.tz
    rows = [
        _row(info.dag_id, run, ti, attempts.get(ti.id, []), i, scale, tz, now, ti.id in on_path)
        for i, ti in enumerate(instances)
    ]
    height = AXIS_HEIGHT + ROW_HEIGHT * len(rows) + 4
    return Gantt(
        info,
        run,
        rows,
        axis_ticks(start, end, tz, scale),
        [label(ti) for ti in chain],
        LABEL_WIDTH + CHART_WIDTH + 10,
        height,
    )


def label(ti: TaskRow) -> str:
    """``task`` or, for one index of a mapped task, ``task[3]``."""
    return f"{ti.task_id}[{ti.map_index}]" if ti.map_index >= 0 else ti.task_id


def critical_path(
    instances: Iterable[TaskRow], upstream: Mapping[str, Sequence[str]], now: datetime
) -> list[TaskRow]:
    """The instances that decided the run's end, root first: start from the one that ended
    last and step back, each time to the upstream instance that ended latest. Every index
    of a mapped upstream counts, since a task waits for all of them. A state set by hand
    ends when the operator set it, which says nothing of how long the run took: such an
    instance is left out, and a chain stops before it."""
    ended: dict[str, list[tuple[datetime, TaskRow]]] = {}
    for ti in instances:
        end = _end(ti, now)
        if end is not None and not ti.set_without_a_try:
            ended.setdefault(ti.task_id, []).append((end, ti))
    if not ended:
        return []
    chain = [max((e for found in ended.values() for e in found), key=_by_end)[1]]
    while True:
        released = [e for up in upstream.get(chain[-1].task_id, ()) for e in ended.get(up, ())]
        if not released:
            return chain[::-1]
        chain.append(max(released, key=_by_end)[1])


def _by_end(entry: tuple[datetime, TaskRow]) -> tuple[datetime, int]:
    """Latest end first; on a tie the instance made later (deterministic either way)."""
    return entry[0], entry[1].id


def _end(ti: TaskRow, now: datetime) -> datetime | None:
    """When an instance ended; a running one has not yet, so it counts as ending now."""
    return now if ti.state == TaskState.RUNNING.value else ti.end_date


def _current_try(ti: TaskRow, now: datetime) -> tuple[datetime, datetime] | None:
    """The start and end of the instance's current try, if it has one to draw. A re-queued
    instance still holds its previous try's start until claimed again, and a cleared one
    its old start with no end: neither is a current try (its attempts still draw)."""
    end = _end(ti, now)
    if ti.start_date is None or end is None:
        return None
    if ti.queued_at is not None and ti.queued_at > ti.start_date:
        return None
    return ti.start_date, end


def _window(
    run: RunRow,
    instances: Sequence[TaskRow],
    attempts: Mapping[int, list[AttemptRow]],
    now: datetime,
) -> tuple[datetime, datetime]:
    """The span the axis covers: the run's start (or its first queued instance) to its end,
    now while it is active. Never empty, so a scale can divide by it, yet no longer than
    its times: a run of quick tasks spans a fraction of a second, and padding it to a
    whole second drew its bars in the left fifth of the axis."""
    times = [run.start_date, run.end_date]
    if RunState(run.state).active:
        times.append(now)
    for ti in instances:
        times += [ti.queued_at, ti.start_date, _end(ti, now)]
    for tries in attempts.values():
        times += [t for a in tries for t in (a.started_at, a.ended_at)]
    known = [t for t in times if t is not None] or [now]
    start, end = min(known), max(known)
    return start, max(end, start + MIN_SPAN)


class TimeScale:
    """Instants to x in pixels across the chart's width."""

    def __init__(self, start: datetime, end: datetime):
        self.start = start
        self.per_second = CHART_WIDTH / (end - start).total_seconds()

    def x(self, at: datetime) -> float:
        return round(LABEL_WIDTH + (at - self.start).total_seconds() * self.per_second, 1)

    def bar(self, start: datetime, end: datetime) -> tuple[float, float]:
        """x and width of a span, at least a pixel wide so an instant still shows."""
        x = self.x(start)
        return x, max(1.0, round(self.x(end) - x, 1))


def _row(
    dag_id: str,
    run: RunRow,
    ti: TaskRow,
    tries: list[AttemptRow],
    index: int,
    scale: TimeScale,
    tz: ZoneInfo,
    now: datetime,
    critical: bool,
) -> Row:
    name = label(ti)
    current = _current_try(ti, now)
    earlier = tries[:-1] if current and tries else tries
    bars = [_try_bar(dag_id, run, ti, a, scale, tz, now) for a in earlier]
    if current is not None:
        bars.append(_current_bar(dag_id, run, ti, current, scale, tz, critical))
    wait = _waited(ti, current, now)
    wait_bar = _wait_bar(name, *wait, scale, tz) if wait else None
    mark = None
    if ti.set_without_a_try:
        mark = _hand_mark(ti, scale, tz)
    elif current is None and not tries:
        mark = _end_mark(ti, scale, tz)
    y = AXIS_HEIGHT + index * ROW_HEIGHT
    return Row(name, ti.state, y, wait_bar, bars, critical, mark)


def _end_mark(ti: TaskRow, scale: TimeScale, tz: ZoneInfo) -> Bar | None:
    """A skipped or upstream-failed instance never ran: a thin mark where it was decided."""
    if ti.end_date is None:
        return None
    title = f"{label(ti)} · {ti.state}\n{local(ti.end_date, tz, seconds=True)}"
    return Bar(scale.x(ti.end_date) - 1, 2.0, ti.state, title)


def _hand_mark(ti: TaskRow, scale: TimeScale, tz: ZoneInfo) -> Bar:
    """A state set without a try (by hand): a hollow mark where it was set, saying why,
    and no length (its earlier tries, if any, keep their own bars)."""
    assert ti.end_date is not None  # set_without_a_try
    title = f"{label(ti)} · {ti.state}: {ti.last_error}\n{local(ti.end_date, tz, seconds=True)}"
    return Bar(scale.x(ti.end_date) - 4, 8.0, ti.state, title, hand=True)


def _waited(
    ti: TaskRow, current: tuple[datetime, datetime] | None, now: datetime
) -> tuple[datetime, datetime] | None:
    """How long the current try waited for a worker: queued until it started, or until now
    while still queued. Other states keep a queued time that no longer means waiting."""
    if ti.queued_at is None:
        return None
    if current is not None and ti.queued_at <= current[0]:
        return ti.queued_at, current[0]
    if ti.state == TaskState.QUEUED.value:
        return ti.queued_at, max(ti.queued_at, now)
    return None


def _current_bar(
    dag_id: str,
    run: RunRow,
    ti: TaskRow,
    span: tuple[datetime, datetime],
    scale: TimeScale,
    tz: ZoneInfo,
    critical: bool,
) -> Bar:
    x, width = scale.bar(*span)
    title = _title(f"{label(ti)} · {ti.state} · try {ti.try_number} of {ti.max_tries}", span, tz)
    href = log_url(dag_id, run.run_id, ti.task_id, ti.try_number, ti.map_index)
    return Bar(x, width, ti.state, title, href, critical=critical)


def _try_bar(
    dag_id: str,
    run: RunRow,
    ti: TaskRow,
    attempt: AttemptRow,
    scale: TimeScale,
    tz: ZoneInfo,
    now: datetime,
) -> Bar:
    span = (attempt.started_at, attempt.ended_at or now)
    x, width = scale.bar(*span)
    outcome = attempt.outcome or "running"
    title = _title(f"{label(ti)} · try {attempt.try_number}: {outcome}", span, tz)
    href = log_url(dag_id, run.run_id, ti.task_id, attempt.try_number, ti.map_index)
    return Bar(x, width, _outcome_state(attempt.outcome), title, href, earlier=True)


def _wait_bar(name: str, queued: datetime, until: datetime, scale: TimeScale, tz: ZoneInfo) -> Bar:
    x, width = scale.bar(queued, until)
    return Bar(x, width, TaskState.QUEUED.value, _title(f"{name} · queued", (queued, until), tz))


def _outcome_state(outcome: str | None) -> str:
    """The state colour of an earlier try: green if it succeeded, blue while it runs,
    yellow for a sensor's poke that found nothing, pink for a task that skipped itself, red
    for every way of failing."""
    if outcome is None:
        return TaskState.RUNNING.value
    if outcome == AttemptOutcome.SUCCESS.value:
        return TaskState.SUCCESS.value
    if outcome == AttemptOutcome.RESCHEDULED.value:
        return TaskState.UP_FOR_RESCHEDULE.value
    if outcome == AttemptOutcome.SKIPPED.value:
        return TaskState.SKIPPED.value
    return TaskState.FAILED.value


def _title(head: str, span: tuple[datetime, datetime], tz: ZoneInfo) -> str:
    start, end = span
    seconds = (end - start).total_seconds()
    when = f"{local(start, tz, seconds=True)} → {local(end, tz, seconds=True)}"
    return f"{head}\n{when} · {fmt_duration(seconds)}"


# ---------------------------------------------------------------- the time axis


def nice_step(span: float, most: int = MAX_TICKS, steps: Sequence[float] = NICE_STEPS) -> float:
    """The smallest of ``steps`` that cuts ``span`` into at most ``most`` parts; past the
    largest, whole weeks."""
    for step in steps:
        if span / step <= most:
            return step
    return 7 * 86400 * math.ceil(span / (7 * 86400 * most))


def axis_ticks(start: datetime, end: datetime, tz: ZoneInfo, scale: TimeScale) -> list[Tick]:
    """Ticks at round local times (a 15-minute step falls on :00, :15... of the DAG's
    timezone; a day step at local midnight), labelled as the DAG's clock reads them.
    The alignment takes the offset at the window's start: a window across a DST change
    keeps its spacing, so its later labels may read one hour off the round value."""
    span = (end - start).total_seconds()
    step = nice_step(span, MAX_TICKS, _SUBSECOND + NICE_STEPS)
    offset = start.astimezone(tz).utcoffset() or timedelta(0)
    local_start = start.timestamp() + offset.total_seconds()
    first = math.ceil(local_start / step) * step - offset.total_seconds()
    fmt = _tick_format(step, start.astimezone(tz).date() != end.astimezone(tz).date())
    digits = max(0, -math.floor(math.log10(step) + 1e-9))  # 0.05 s: two decimals
    ticks = []
    for n in range(int((end.timestamp() - first) // step) + 2):
        at = datetime.fromtimestamp(round(first + n * step, 6), UTC)
        if at > end:
            break
        text = at.astimezone(tz).strftime(fmt)
        if digits:
            text += f".{at.microsecond // 10 ** (6 - digits):0{digits}d}"
        ticks.append(Tick(scale.x(at), text))
    return ticks


def _tick_format(step: float, several_days: bool) -> str:
    if step >= 86400:
        return "%Y-%m-%d"
    clock = "%H:%M:%S" if step < 60 else "%H:%M"
    return f"%m-%d {clock}" if several_days else clock

"""The run grid's rows and cells: task groups as row groups, a mapped task as one summary row.

A group gets a header row whose cells add its tasks up per run; a mapped task gets one row
whose cells count its instances by state, and a row per index once expanded. Which groups
are folded and which mapped tasks are expanded is part of the URL (``?fold=a,a.b`` and
``?expand=task``), so both work without JavaScript and survive a refresh; dagrun.js only
folds groups in place. Folded rows are still sent (``hidden``), so unfolding in place needs
no request.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from functools import reduce
from zoneinfo import ZoneInfo

from dagrun.states import TaskState, merged
from dagrun.store.run_reads import RunRow
from dagrun.store.task_reads import Cell, GridPage
from dagrun.webapp.formatting import fmt_duration, live_duration, local, utc
from dagrun.webapp.urls import run_url

#: The order states are counted in a summary: outcomes first, then what is still going.
SUMMARY_ORDER = (
    TaskState.SUCCESS,
    TaskState.FAILED,
    TaskState.UPSTREAM_FAILED,
    TaskState.SKIPPED,
    TaskState.RUNNING,
    TaskState.QUEUED,
    TaskState.UP_FOR_RETRY,
    TaskState.UP_FOR_RESCHEDULE,
    TaskState.NONE,
)

Counts = tuple[tuple[str, int], ...]
_NONE = TaskState.NONE.value


@dataclass(frozen=True)
class GridShape:
    """The groups folded and the mapped tasks expanded, as the query string names them."""

    fold: frozenset[str] = frozenset()
    expand: frozenset[str] = frozenset()

    @classmethod
    def from_query(cls, query: dict[str, str]) -> GridShape:
        return cls(_names(query.get("fold")), _names(query.get("expand")))

    def fold_param(self, group: str) -> str | None:
        """``?fold=`` with ``group`` toggled (None: the parameter goes away)."""
        return _joined(self.fold ^ {group})

    def expand_param(self, task_id: str) -> str | None:
        """``?expand=`` with ``task_id`` toggled (None: the parameter goes away)."""
        return _joined(self.expand ^ {task_id})

    def hides(self, group: str) -> bool:
        """Whether rows inside ``group`` are folded away: it or a group around it is folded."""
        return any(path in self.fold for path in _paths(group))


def _names(value: str | None) -> frozenset[str]:
    return frozenset(name for name in (value or "").split(",") if name)


def _joined(names: frozenset[str]) -> str | None:
    return ",".join(sorted(names)) or None


def _paths(group: str) -> list[str]:
    """The group and those around it, outermost first: ``a.b`` -> ``a``, ``a.b``."""
    parts = group.split(".") if group else []
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


@dataclass(frozen=True)
class GridColumn:
    """One run as a grid column, with what each of its cells repeats worked out once."""

    run: RunRow
    href: str
    local: str
    utc: str


class _Counted:
    """What a task's cell and a group's cell share: the run of their column, and the states
    of what they add up (``counts``). No fields of its own, so ``GridCell`` keeps its slots."""

    __slots__ = ()
    column: GridColumn
    counts: Counts

    @property
    def run_id(self) -> str:
        return self.column.run.run_id

    @property
    def summary(self) -> str:
        """What the cell adds up, by state: ``2 success / 1 failed``."""
        return summary(self.counts)


@dataclass(slots=True)
class GridCell(_Counted):
    """A task's cell in one run: an instance, a mapped task's instances added up (``counts``
    by state), or one index of a mapped task (``map_index`` >= 0 without ``counts``).

    Not frozen: a frozen dataclass sets each field through ``object.__setattr__``, four
    times slower, and a page makes one cell per task and run (1,500 for 50 runs of 30).
    """

    task_id: str
    column: GridColumn
    state: str
    try_number: int
    max_tries: int
    duration: float | None
    map_index: int = -1
    counts: Counts = ()

    @property
    def instances(self) -> int:
        return sum(n for _, n in self.counts)

    @property
    def title(self) -> str:
        """What hovering shows: state, try and duration, and the date in both zones."""
        name = self.task_id if self.counts or self.map_index < 0 else self.indexed_name
        counted = f"{self.summary}\n" if self.counts else ""
        return (
            f"{name} · {self.state}\n{counted}try {self.try_number} of {self.max_tries} · "
            f"{fmt_duration(self.duration)}\n{self.column.local} ({self.column.utc})"
        )

    @property
    def indexed_name(self) -> str:
        return f"{self.task_id} [{self.map_index}]"

    @property
    def href(self) -> str:
        """The task's line on the run page; a mapped task's summary goes to its first index."""
        index = f"-{self.map_index}" if self.map_index >= 0 else ""
        return f"{self.column.href}#task-{self.task_id}{index}"


@dataclass(frozen=True)
class GroupCell(_Counted):
    """A task group's cell in one run: the state its tasks add up to, and their states."""

    group: str
    column: GridColumn
    state: str
    counts: Counts

    @property
    def title(self) -> str:
        return (
            f"group {self.group} · {self.state}\n{self.summary}\n"
            f"{self.column.local} ({self.column.utc})"
        )

    @property
    def href(self) -> str:
        return self.column.href


@dataclass(frozen=True)
class GridRow:
    """One row: a ``task`` (``mapped`` when it has indexes), a ``group`` header (``task_id``
    is the group's path), or one ``index`` of an expanded mapped task.

    ``group`` is the path of the group the row sits in ("" for none); ``hidden`` says that
    group or one around it is folded; ``open`` is an unfolded group or an expanded task.
    """

    task_id: str
    removed: bool
    cells: list[GridCell] | list[GroupCell]
    kind: str = "task"
    group: str = ""
    hidden: bool = False
    open: bool = False
    map_index: int = -1

    @property
    def depth(self) -> int:
        """How many groups it sits in (a group header: those around it)."""
        return len(_paths(self.group))

    @property
    def label(self) -> str:
        """A group header shows the group's own id; its path is in the rows around it."""
        return self.task_id.rpartition(".")[2] if self.kind == "group" else self.task_id


def summary(counts: Counts) -> str:
    return " / ".join(f"{n} {state}" for state, n in counts)


def _ordered(counts: Counter) -> Counts:
    return tuple((s.value, counts[s.value]) for s in SUMMARY_ORDER if counts[s.value])


# ---------------------------------------------------------------- building the rows


@dataclass(frozen=True)
class GridTask:
    """A task as the grid lays it out: its group, whether it is mapped or removed."""

    task_id: str
    group: str
    mapped: bool
    removed: bool


def grid_rows(
    columns: list[GridColumn],
    page: GridPage,
    tasks: list[GridTask],
    shape: GridShape,
    now: datetime,
) -> list[GridRow]:
    """Rows (tasks by runs) in task order, each group's header above its first task with all
    its tasks and nested groups under it; built once for the HTML grid and the JSON alike."""
    by_task = {t.task_id: t for t in tasks}
    cells = {t.task_id: _task_cells(t, columns, page, now) for t in tasks}
    rows: list[GridRow] = []
    for kind, key in _outline(tasks):
        if kind == "group":
            rows.append(_group_row(key, columns, cells, by_task, shape))
        else:
            rows.extend(_task_rows(by_task[key], cells[key], columns, page, shape, now))
    return rows


def _outline(tasks: list[GridTask]) -> list[tuple[str, str]]:
    """``("group", path)`` and ``("task", id)`` in display order: a group where its first
    task falls, its members under it in task order (the tasks of a group need not be
    contiguous in topological order)."""
    children: dict[str, list[tuple[str, str]]] = {"": []}
    for task in tasks:
        parent = ""
        for path in _paths(task.group):
            if path not in children:
                children[path] = []
                children[parent].append(("group", path))
            parent = path
        children[task.group].append(("task", task.task_id))
    order: list[tuple[str, str]] = []

    def walk(path: str) -> None:
        for kind, key in children[path]:
            order.append((kind, key))
            if kind == "group":
                walk(key)

    walk("")
    return order


def _group_row(
    path: str,
    columns: list[GridColumn],
    cells: dict[str, list[GridCell]],
    by_task: dict[str, GridTask],
    shape: GridShape,
) -> GridRow:
    inside = path + "."
    members = [
        cells[t]
        for t, task in by_task.items()
        if task.group == path or task.group.startswith(inside)
    ]
    parent = path.rpartition(".")[0]
    group_cells = [
        _group_cell(path, column, [row[i].state for row in members])
        for i, column in enumerate(columns)
    ]
    return GridRow(
        path,
        False,
        group_cells,
        "group",
        parent,
        hidden=shape.hides(parent),
        open=path not in shape.fold,
    )


def _group_cell(path: str, column: GridColumn, states: list[str]) -> GroupCell:
    """Its tasks add up as a mapped task's instances do (``states.merged``: a task not run
    yet keeps the group unfinished, a failure outranks successes); skipped, the lowest rank,
    is where the adding starts."""
    state = reduce(merged, (TaskState(s) for s in states), TaskState.SKIPPED)
    return GroupCell(path, column, state.value, _ordered(Counter(states)))


def _task_rows(
    task: GridTask,
    cells: list[GridCell],
    columns: list[GridColumn],
    page: GridPage,
    shape: GridShape,
    now: datetime,
) -> list[GridRow]:
    """A task's row; a mapped task's expanded indexes each get a row under it."""
    hidden = shape.hides(task.group)
    expanded = task.mapped and task.task_id in shape.expand
    kind = "mapped" if task.mapped else "task"
    row = GridRow(task.task_id, task.removed, cells, kind, task.group, hidden, expanded)
    if not expanded:
        return [row]
    found = [
        {c.map_index: c for c in page.indexes.get((col.run.id, task.task_id), ())}
        for col in columns
    ]
    return [row] + [
        GridRow(
            task.task_id,
            task.removed,
            [
                _index_cell(task.task_id, i, col, by_index.get(i), now)
                for col, by_index in zip(columns, found, strict=True)
            ],
            "index",
            task.group,
            hidden,
            map_index=i,
        )
        for i in sorted({i for by_index in found for i in by_index})
    ]


def _task_cells(
    task: GridTask, columns: list[GridColumn], page: GridPage, now: datetime
) -> list[GridCell]:
    """The task's cell in each run. One loop with no call per cell but the duration's: this
    is the grid's hot path (a cell per task and run)."""
    found = page.cells.get
    counted = page.counts.get if task.mapped else None
    task_id = task.task_id
    cells = []
    for column in columns:
        key = (column.run.id, task_id)
        cell = found(key)
        if cell is None:  # the run has not been admitted yet, or the task is newer than it
            cells.append(GridCell(task_id, column, _NONE, 0, 0, None))
            continue
        counts = counted(key) if counted else None
        duration = live_duration(cell.state, cell.duration, cell.start_date, now)
        cells.append(
            GridCell(
                task_id,
                column,
                cell.state,
                cell.try_number,
                cell.max_tries,
                duration,
                cell.map_index,
                _ordered(counts) if counts else (),
            )
        )
    return cells


def _index_cell(
    task_id: str, index: int, column: GridColumn, cell: Cell | None, now: datetime
) -> GridCell:
    if cell is None:  # this run made fewer instances
        return GridCell(task_id, column, _NONE, 0, 0, None, index)
    duration = live_duration(cell.state, cell.duration, cell.start_date, now)
    return GridCell(task_id, column, cell.state, cell.try_number, cell.max_tries, duration, index)


def grid_columns(dag_id: str, tz: ZoneInfo, runs: list[RunRow]) -> list[GridColumn]:
    return [
        GridColumn(
            run, run_url(dag_id, run.run_id), local(run.logical_date, tz), utc(run.logical_date)
        )
        for run in runs
    ]


def grid_tasks(
    order: Iterable[tuple[str, bool]], groups: dict[str, str | None], mapped: Iterable[str]
) -> list[GridTask]:
    """The grid's tasks from the task order: a removed task has no group any more."""
    mapped = set(mapped)
    return [GridTask(t, groups.get(t) or "", t in mapped, removed) for t, removed in order]

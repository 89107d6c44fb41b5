"""The DAG object: ``DAG``, its ``with`` block (the current DAG), ``collect_dags`` and the id rule.

Everything in the authoring API runs while a user's DAG file is imported, so it validates
eagerly and names the offending DAG or task in every error: a mistake should surface when the
file is parsed, not at 3 a.m. when the task first runs. The objects built here are turned
into plain, serialisable :class:`dagrun.parsing.spec.DagSpec` values by the parser; nothing
downstream holds a ``DAG``. The tasks are in ``dagrun.authoring.tasks``, ``@task`` in
``dagrun.authoring.taskflow``, their options in ``dagrun.authoring.options``.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from types import FrameType
from typing import TYPE_CHECKING, Any, Self

from dagrun.authoring.assets import ConditionData, split_schedule
from dagrun.authoring.context_names import CONTEXT_NAMES
from dagrun.authoring.options import callables, check_options, is_whole
from dagrun.authoring.params import serialise
from dagrun.errors import DagDefinitionError
from dagrun.states import CallbackEvent
from dagrun.timing.instants import parse_duration
from dagrun.timing.timetable import TimeSchedule, Timetable, make_timetable

if TYPE_CHECKING:
    from dagrun.authoring.assets import Asset, AssetCondition, AssetOrTimeSchedule
    from dagrun.authoring.groups import TaskGroup
    from dagrun.authoring.setup_teardown import Scope
    from dagrun.authoring.tasks import Task

SAFE_ID = re.compile(r"[A-Za-z0-9_.-]{1,200}")

_dag_stack: list[DAG] = []
_collector: list[DAG] | None = None


def collect_dags() -> list[DAG]:
    """Start recording every DAG constructed from now on; returns the list that fills up.

    The parser calls this before importing a file so that DAGs built inside functions or
    loops are found too, not only those bound to module globals.
    """
    global _collector
    _collector = []
    return _collector


def current_dag() -> DAG | None:
    return _dag_stack[-1] if _dag_stack else None


def check_id(kind: str, value: object, **where: str | None) -> str:
    """Ids become path segments (logs, partitions) and URL parts, so only safe characters,
    and never ``.`` or ``..``. ``fullmatch``, because ``$`` also matches before a final
    newline and would let ``"abc\\n"`` through."""
    if not isinstance(value, str) or not SAFE_ID.fullmatch(value) or not value.strip("."):
        raise DagDefinitionError(
            f"{kind} id {value!r} must be 1-200 characters of letters, digits, '_', '.' or '-'"
            " (and not only dots)",
            **where,
        )
    return value


class DAG:
    """A pipeline: a schedule, a time zone, policies, and a graph of tasks."""

    #: The context names its callbacks receive (a DAG made by ``dagrun.airflow`` gives
    #: Airflow's too).
    context_names: tuple[str, ...] = CONTEXT_NAMES

    def __init__(
        self,
        dag_id: str,
        schedule: TimeSchedule
        | list[Asset]
        | tuple[Asset, ...]
        | AssetCondition
        | AssetOrTimeSchedule = None,
        start_date: Any = None,
        end_date: Any = None,
        timezone: str = "UTC",
        catchup: bool = True,
        max_active_runs: int = 16,
        default_args: dict[str, Any] | None = None,
        tags: Iterable[str] = (),
        params: Mapping[str, Any] | None = None,
        description: str | None = None,
        is_paused_upon_creation: bool = False,
        spread: str | int | timedelta | None = None,
        dagrun_timeout: float | timedelta | None = None,
        max_active_tasks: int | None = None,
        on_failure_callback: Any = None,
        on_success_callback: Any = None,
    ):
        self.dag_id = check_id("DAG", dag_id)
        #: The assets of a per-partition schedule (``schedule=[Asset(...)]``, no time-based
        #: runs), or the asset condition of an Airflow-style one (``Asset("a") | ...``,
        #: with time-based runs too from an ``AssetOrTimeSchedule``); see authoring.assets.
        self.assets: tuple[str, ...]
        self.condition: ConditionData | None
        timed, self.assets, self.condition = split_schedule(schedule, self.dag_id)
        self.schedule: TimeSchedule = timed
        self.timetable: Timetable = make_timetable(timed, timezone, start_date, end_date)
        self.timezone = timezone
        self.catchup = bool(catchup)
        if not is_whole(max_active_runs) or max_active_runs < 1:
            raise DagDefinitionError("max_active_runs must be a positive integer", dag_id=dag_id)
        self.max_active_runs = max_active_runs
        self.default_args = check_options(default_args or {}, dag_id=dag_id, task_id=None)
        self.tags = [str(t) for t in tags]
        #: Declared params in their stored form (:func:`dagrun.authoring.params.serialise`).
        self.params = serialise(params or {}, dag_id=self.dag_id)
        self.description = description
        self.is_paused_upon_creation = bool(is_paused_upon_creation)
        self.spread = parse_duration(spread) if spread is not None else None
        self.dagrun_timeout = _timeout(dagrun_timeout, dag_id)
        if max_active_tasks is not None and (
            not is_whole(max_active_tasks) or max_active_tasks < 1
        ):
            raise DagDefinitionError("max_active_tasks must be a positive integer", dag_id=dag_id)
        self.max_active_tasks = max_active_tasks
        self.callbacks = {
            CallbackEvent.RUN_FAILURE: callables(
                on_failure_callback, "on_failure_callback", dag_id
            ),
            CallbackEvent.RUN_SUCCESS: callables(
                on_success_callback, "on_success_callback", dag_id
            ),
        }
        self.tasks: dict[str, Task] = {}
        #: Labels of edges, (upstream id, downstream id) -> text (Airflow's ``Label``).
        self.edge_labels: dict[tuple[str, str], str] = {}
        #: Task groups by id (dagrun.authoring.groups); a group's id and a task's never coincide.
        self.groups: dict[str, TaskGroup] = {}
        #: The groups open here, innermost last: a task created now joins the innermost.
        self.open_groups: list[TaskGroup] = []
        #: The ``with`` blocks of setup and teardown tasks open here, innermost last: a task
        #: created now is work of the innermost (dagrun.authoring.setup_teardown).
        self.open_scopes: list[Scope] = []
        self.fileloc, self.definition_line = _definition_site()
        #: What the file asks for that dagrun accepts without acting on it, as (line, text)
        #: once each: the file's warnings (``dags errors --warnings``).
        self.warnings: list[tuple[int | None, str]] = []
        if _collector is not None:
            _collector.append(self)

    def __enter__(self) -> Self:
        _dag_stack.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _dag_stack.pop()

    def __repr__(self) -> str:
        return f"<DAG {self.dag_id}>"

    def warn(self, message: str) -> None:
        """Record a warning of the DAG's file, at the line of the file that led to it."""
        if all(known != message for _, known in self.warnings):
            self.warnings.append((_line_in(self.fileloc), message))

    def add_task(self, task: Task) -> None:
        if task.task_id in self.tasks:
            raise DagDefinitionError(
                f"duplicate task id '{task.task_id}'", dag_id=self.dag_id, task_id=task.task_id
            )
        if task.task_id in self.groups:
            raise DagDefinitionError(
                f"task id '{task.task_id}' is also a task group's id", dag_id=self.dag_id
            )
        self.tasks[task.task_id] = task
        if self.open_scopes:
            self.open_scopes[-1].tasks.append(task)

    def add_group(self, group: TaskGroup) -> None:
        """Groups share the task ids' namespace: ``group >> t`` and the views name both."""
        if group.group_id in self.tasks or group.group_id in self.groups:
            other = "a task's" if group.group_id in self.tasks else "another task group's"
            raise DagDefinitionError(
                f"task group id '{group.group_id}' is also {other} id", dag_id=self.dag_id
            )
        self.groups[group.group_id] = group

    def qualify(self, label: str) -> str:
        """The id a task or group labelled ``label`` gets if created now: the innermost
        open group's prefix before it, if any."""
        return self.open_groups[-1].child_id(label) if self.open_groups else label

    def unique_task_id(self, base: str) -> str:
        """``base``, or ``base__1``, ``base__2``... when a @task function is called again
        (judged on the id the task will get, with its group's prefix)."""
        return first_free(base, lambda label: self.qualify(label) in self.tasks)


def first_free(base: str, taken: Callable[[str], bool]) -> str:
    """``base``, or the first of ``base__1``, ``base__2``... that is not ``taken``: Airflow's
    suffixes for a task or group made again under one id, so ids match across the two."""
    if not taken(base):
        return base
    n = 1
    while taken(f"{base}__{n}"):
        n += 1
    return f"{base}__{n}"


#: dagrun's own source files start with this: the user code that made a DAG is the first
#: frame outside them (a DAG made through ``dagrun.airflow`` passes through two of them).
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _definition_site() -> tuple[str | None, int | None]:
    """The file and line of the user code that constructed the DAG (for error messages)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame = frame.f_back
    if frame is None:
        return None, None
    return frame.f_code.co_filename, frame.f_lineno


def _line_in(fileloc: str | None) -> int | None:
    """The line of ``fileloc`` that is running now (the innermost call from that file)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename != fileloc:
        frame = frame.f_back
    return frame.f_lineno if frame is not None else None


def _timeout(value: Any, dag_id: str) -> float | None:
    """``dagrun_timeout`` in seconds (a number, a timedelta or a duration such as "2h")."""
    if value is None:
        return None
    try:
        seconds = parse_duration(value).total_seconds()
    except Exception as exc:
        raise DagDefinitionError(f"dagrun_timeout: {exc}", dag_id=dag_id) from None
    if seconds <= 0:
        raise DagDefinitionError("dagrun_timeout must be positive", dag_id=dag_id)
    return seconds

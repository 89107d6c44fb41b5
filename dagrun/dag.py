"""The authoring API: ``DAG``, ``@task``, ``BashTask`` and the ``>>`` / ``<<`` operators.

Everything here runs while a user's DAG file is imported, so it validates eagerly and names
the offending task in every error: a mistake should surface when the file is parsed, not at
3 a.m. when the task first runs. The objects built here are turned into plain, serialisable
:class:`dagrun.spec.DagSpec` values by the parser; nothing downstream holds a ``DAG``.
"""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any

from dagrun.errors import DagDefinitionError
from dagrun.instants import parse_duration
from dagrun.params import serialise
from dagrun.states import CallbackEvent, TriggerRule
from dagrun.timetable import Timetable, make_timetable

SAFE_ID = re.compile(r"[A-Za-z0-9_.-]{1,200}")

#: Names a task callable may declare to receive run context (DESIGN section 2).
CONTEXT_NAMES = frozenset(
    {
        "ds",
        "ds_nodash",
        "logical_date",
        "data_interval_start",
        "data_interval_end",
        "run_id",
        "dag_id",
        "task_id",
        "try_number",
        "params",
        "conf",
        "ctx",
    }
)

#: Task options and their defaults; ``default_args`` and per-task options override these.
TASK_DEFAULTS: dict[str, Any] = {
    "retries": 0,
    "retry_delay": 10.0,
    "retry_exponential_backoff": True,
    "max_retry_delay": 600.0,
    "execution_timeout": None,
    "trigger_rule": TriggerRule.ALL_SUCCESS.value,
    "depends_on_past": False,
    "priority_weight": 1,
    "pool": None,
    "params": None,
    "on_failure_callback": None,
    "on_retry_callback": None,
    "on_success_callback": None,
}

#: Task options holding callbacks, and the event each one hears of.
TASK_CALLBACKS = {
    "on_success_callback": CallbackEvent.TASK_SUCCESS,
    "on_retry_callback": CallbackEvent.TASK_RETRY,
    "on_failure_callback": CallbackEvent.TASK_FAILURE,
}

_DURATION_OPTIONS = ("retry_delay", "max_retry_delay", "execution_timeout")

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

    def __init__(
        self,
        dag_id: str,
        schedule: str | timedelta | None = None,
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
        self.schedule = schedule
        self.timetable: Timetable = make_timetable(schedule, timezone, start_date, end_date)
        self.timezone = timezone
        self.catchup = bool(catchup)
        if not _is_whole(max_active_runs) or max_active_runs < 1:
            raise DagDefinitionError("max_active_runs must be a positive integer", dag_id=dag_id)
        self.max_active_runs = max_active_runs
        self.default_args = _check_options(default_args or {}, dag_id=dag_id, task_id=None)
        self.tags = [str(t) for t in tags]
        #: Declared params in their stored form (:func:`dagrun.params.serialise`).
        self.params = serialise(params or {}, dag_id=self.dag_id)
        self.description = description
        self.is_paused_upon_creation = bool(is_paused_upon_creation)
        self.spread = parse_duration(spread) if spread is not None else None
        self.dagrun_timeout = _timeout(dagrun_timeout, dag_id)
        if max_active_tasks is not None and (
            not _is_whole(max_active_tasks) or max_active_tasks < 1
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
        self.fileloc, self.definition_line = _definition_site()
        if _collector is not None:
            _collector.append(self)

    def __enter__(self) -> DAG:
        _dag_stack.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _dag_stack.pop()

    def __repr__(self) -> str:
        return f"<DAG {self.dag_id}>"

    def add_task(self, task: Task) -> None:
        if task.task_id in self.tasks:
            raise DagDefinitionError(
                f"duplicate task id '{task.task_id}'", dag_id=self.dag_id, task_id=task.task_id
            )
        self.tasks[task.task_id] = task

    def unique_task_id(self, base: str) -> str:
        """``base``, or ``base__2``, ``base__3``... when a @task function is called again."""
        if base not in self.tasks:
            return base
        n = 2
        while f"{base}__{n}" in self.tasks:
            n += 1
        return f"{base}__{n}"


def _definition_site() -> tuple[str | None, int | None]:
    """The file and line of the user code that constructed the DAG (for error messages)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename == __file__:
        frame = frame.f_back
    if frame is None:
        return None, None
    return frame.f_code.co_filename, frame.f_lineno


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


def callables(
    value: Any, option: str, dag_id: str | None, task_id: str | None = None
) -> list[Callable[..., Any]]:
    """A callback option as a list of callables (None: none; one callable; a list)."""
    if value is None:
        return []
    found = list(value) if isinstance(value, list | tuple) else [value]
    for item in found:
        if not callable(item):
            raise DagDefinitionError(
                f"{option} must be a callable or a list of them, not {item!r}",
                dag_id=dag_id,
                task_id=task_id,
            )
    return found


def _check_options(options: dict[str, Any], *, dag_id: str | None, task_id: str | None) -> dict:
    """Reject unknown options and bad values with an error naming the task."""
    unknown = sorted(set(options) - set(TASK_DEFAULTS))
    if unknown:
        raise DagDefinitionError(
            f"unknown option {unknown[0]!r} (known: {', '.join(sorted(TASK_DEFAULTS))})",
            dag_id=dag_id,
            task_id=task_id,
        )
    checked = dict(options)
    if "trigger_rule" in checked:
        try:
            checked["trigger_rule"] = TriggerRule(checked["trigger_rule"]).value
        except ValueError:
            rules = ", ".join(r.value for r in TriggerRule)
            raise DagDefinitionError(
                f"bad trigger_rule {checked['trigger_rule']!r} (one of: {rules})",
                dag_id=dag_id,
                task_id=task_id,
            ) from None
    if "retries" in checked and (not _is_whole(checked["retries"]) or checked["retries"] < 0):
        raise DagDefinitionError(
            f"retries must be a whole number >= 0, not {checked['retries']!r}",
            dag_id=dag_id,
            task_id=task_id,
        )
    if "priority_weight" in checked and not _is_whole(checked["priority_weight"]):
        raise DagDefinitionError(
            f"priority_weight must be a whole number, not {checked['priority_weight']!r}",
            dag_id=dag_id,
            task_id=task_id,
        )
    for name in TASK_CALLBACKS:
        if name in checked:
            checked[name] = callables(checked[name], name, dag_id, task_id)
    for name in _DURATION_OPTIONS:
        if checked.get(name) is not None:
            try:
                checked[name] = parse_duration(checked[name]).total_seconds()
            except Exception as exc:
                raise DagDefinitionError(f"{name}: {exc}", dag_id=dag_id, task_id=task_id) from None
    return checked


def _is_whole(value: object) -> bool:
    """An int that is not a bool (``True`` is an int in Python, but never a count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _resolve(other: Any) -> list[Task]:
    """The tasks behind a ``>>`` operand: a task, an output, a @task function, a list."""
    if isinstance(other, Task):
        return [other]
    if isinstance(other, TaskOutput):
        return [other.task]
    if isinstance(other, TaskFunction):
        return [other.last_task()]
    if isinstance(other, list | tuple | set):
        return [t for item in other for t in _resolve(item)]
    raise TypeError(f"cannot set a dependency on {other!r}: expected a task or a list of tasks")


class DependencyMixin:
    """``a >> b``, ``a << b``, ``[a, b] >> c`` and ``c << [a, b]`` for tasks and their outputs."""

    def _tasks(self) -> list[Task]:
        return _resolve(self)

    def __rshift__(self, other: Any) -> Any:
        for up in self._tasks():
            for down in _resolve(other):
                down.add_upstream(up)
        return other

    def __lshift__(self, other: Any) -> Any:
        for down in self._tasks():
            for up in _resolve(other):
                down.add_upstream(up)
        return other

    def __rrshift__(self, other: Any) -> Any:
        self.__lshift__(other)
        return self

    def __rlshift__(self, other: Any) -> Any:
        self.__rshift__(other)
        return self


class Task(DependencyMixin):
    """One node of the graph. Subclasses say what running it means."""

    kind = "task"

    def __init__(self, task_id: str, dag: DAG | None = None, **options: Any):
        dag = dag or current_dag()
        if dag is None:
            raise DagDefinitionError(
                "created outside a DAG: use `with DAG(...):` or pass dag=", task_id=task_id
            )
        # The id is not passed as task_id=: a bad one (with a newline) would be printed raw
        # in the message's prefix, and an import error keeps only its first line.
        self.task_id = check_id("task", task_id, dag_id=dag.dag_id)
        self.dag = dag
        own = _check_options(options, dag_id=dag.dag_id, task_id=task_id)
        self.options = {**TASK_DEFAULTS, **dag.default_args, **own}
        self.upstream_ids: list[str] = []
        dag.add_task(self)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.dag.dag_id}.{self.task_id}>"

    def add_upstream(self, other: Task) -> None:
        if other.dag is not self.dag:
            raise DagDefinitionError(
                f"cannot depend on '{other.task_id}' of another DAG '{other.dag.dag_id}'",
                dag_id=self.dag.dag_id,
                task_id=self.task_id,
            )
        if other.task_id not in self.upstream_ids:
            self.upstream_ids.append(other.task_id)

    @property
    def data_inputs(self) -> list[str]:
        """Upstream task ids whose return values this task receives (TaskFlow)."""
        return []


class BashTask(Task):
    """Runs a shell command (a Jinja2 template) in its own process group."""

    kind = "bash"

    def __init__(
        self,
        task_id: str,
        command: str,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        dag: DAG | None = None,
        **options: Any,
    ):
        if not isinstance(command, str) or not command.strip():
            raise DagDefinitionError("BashTask needs a non-empty command string", task_id=task_id)
        self.command = command
        self.env = {str(k): str(v) for k, v in (env or {}).items()}
        self.cwd = cwd
        super().__init__(task_id, dag=dag, **options)


class PythonTask(Task):
    """Calls a Python function, passing the context names it declares and upstream outputs."""

    kind = "python"

    def __init__(
        self,
        task_id: str,
        python_callable: Callable[..., Any],
        args: tuple = (),
        kwargs: dict[str, Any] | None = None,
        dag: DAG | None = None,
        **options: Any,
    ):
        self.python_callable = python_callable
        self.args = tuple(args)
        self.kwargs = dict(kwargs or {})
        super().__init__(task_id, dag=dag, **options)
        self._check_signature()
        for value in (*self.args, *self.kwargs.values()):
            if isinstance(value, TaskOutput):
                self.add_upstream(value.task)

    def _check_signature(self) -> None:
        """Every parameter not bound by the call must be a context name or have a default."""
        signature = inspect.signature(self.python_callable)
        try:
            bound = signature.bind_partial(*self.args, **self.kwargs)
        except TypeError as exc:
            raise DagDefinitionError(
                f"bad arguments: {exc}", dag_id=self.dag.dag_id, task_id=self.task_id
            ) from None
        for name, param in signature.parameters.items():
            if name in bound.arguments or param.kind in (param.VAR_KEYWORD, param.VAR_POSITIONAL):
                continue
            if name not in CONTEXT_NAMES and param.default is param.empty:
                raise DagDefinitionError(
                    f"asks for {name!r}, which is neither an argument nor a context name "
                    f"({', '.join(sorted(CONTEXT_NAMES))})",
                    dag_id=self.dag.dag_id,
                    task_id=self.task_id,
                )

    @property
    def data_inputs(self) -> list[str]:
        values = (*self.args, *self.kwargs.values())
        return sorted({v.task.task_id for v in values if isinstance(v, TaskOutput)})


class TaskOutput(DependencyMixin):
    """The future return value of a task: pass it to another task call to depend on it."""

    def __init__(self, task: Task):
        self.task = task

    def __repr__(self) -> str:
        return f"<output of {self.task.task_id}>"


class TaskFunction:
    """What ``@task`` returns: calling it inside a DAG adds a task and returns its output."""

    def __init__(self, function: Callable[..., Any], options: dict[str, Any]):
        self.function = function
        self.task_id = options.pop("task_id", None) or function.__name__
        self.options = options
        self.tasks: list[PythonTask] = []
        self.__doc__ = function.__doc__
        self.__name__ = function.__name__

    def __call__(self, *args: Any, **kwargs: Any) -> TaskOutput:
        dag = current_dag()
        if dag is None:
            raise DagDefinitionError(
                "called outside a DAG: call @task functions inside `with DAG(...):`",
                task_id=self.task_id,
            )
        task_id = dag.unique_task_id(self.task_id)
        created = PythonTask(task_id, self.function, args, kwargs, dag=dag, **self.options)
        self.tasks.append(created)
        return TaskOutput(created)

    def last_task(self) -> Task:
        if not self.tasks:
            raise DagDefinitionError(
                "used in a dependency before it was called; write `name()` to create the task",
                task_id=self.task_id,
            )
        return self.tasks[-1]

    def __rshift__(self, other: Any) -> Any:
        return TaskOutput(self.last_task()) >> other

    def __lshift__(self, other: Any) -> Any:
        return TaskOutput(self.last_task()) << other

    def __rrshift__(self, other: Any) -> Any:
        TaskOutput(self.last_task()).__rrshift__(other)
        return self

    def __rlshift__(self, other: Any) -> Any:
        TaskOutput(self.last_task()).__rlshift__(other)
        return self


def task(function: Callable[..., Any] | None = None, **options: Any) -> Any:
    """Decorate a function as a task: ``@task`` or ``@task(retries=5, trigger_rule=...)``."""
    if function is not None:
        return TaskFunction(function, options)
    return lambda f: TaskFunction(f, dict(options))

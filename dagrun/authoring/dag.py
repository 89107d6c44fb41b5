"""The authoring API: ``DAG``, ``@task``, ``BashTask`` and the ``>>`` / ``<<`` operators.

Everything here runs while a user's DAG file is imported, so it validates eagerly and names
the offending task in every error: a mistake should surface when the file is parsed, not at
3 a.m. when the task first runs. The objects built here are turned into plain, serialisable
:class:`dagrun.parsing.spec.DagSpec` values by the parser; nothing downstream holds a ``DAG``.
"""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from dagrun.authoring import mapping, templates
from dagrun.authoring.assets import is_asset_schedule
from dagrun.authoring.assets import names as asset_names
from dagrun.authoring.context_names import CONTEXT_NAMES
from dagrun.authoring.params import serialise
from dagrun.authoring.sensor_options import SensorMode, SensorSpec
from dagrun.errors import DagDefinitionError
from dagrun.states import CallbackEvent, TriggerRule
from dagrun.timing.instants import parse_duration
from dagrun.timing.timetable import Timetable, make_timetable

if TYPE_CHECKING:
    from dagrun.authoring.groups import TaskGroup

SAFE_ID = re.compile(r"[A-Za-z0-9_.-]{1,200}")

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
    "outlets": None,
}

#: Task options holding callbacks, and the event each one hears of.
TASK_CALLBACKS = {
    "on_success_callback": CallbackEvent.TASK_SUCCESS,
    "on_retry_callback": CallbackEvent.TASK_RETRY,
    "on_failure_callback": CallbackEvent.TASK_FAILURE,
}

_DURATION_OPTIONS = ("retry_delay", "max_retry_delay", "execution_timeout")

#: A sensor's options (``@task.sensor`` and the built-ins of ``dagrun.runtime.sensors``), with their
#: defaults: seconds between pokes, seconds from the first poke until it gives up, how it
#: waits, and whether giving up skips it instead of failing it.
SENSOR_DEFAULTS: dict[str, Any] = {
    "poke_interval": 60.0,
    "timeout": 3600.0,
    "mode": SensorMode.RESCHEDULE.value,
    "soft_fail": False,
}

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
        #: The assets the DAG is scheduled on (``schedule=[Asset(...)]``); none for a time
        #: schedule. An asset-scheduled DAG has no time-based runs.
        self.assets: tuple[str, ...] = ()
        if is_asset_schedule(schedule):
            self.assets = asset_names(schedule, "schedule", dag_id=dag_id)
            if not self.assets:
                raise DagDefinitionError("schedule=[] lists no asset", dag_id=dag_id)
            schedule = None
        self.schedule = schedule
        self.timetable: Timetable = make_timetable(schedule, timezone, start_date, end_date)
        self.timezone = timezone
        self.catchup = bool(catchup)
        if not _is_whole(max_active_runs) or max_active_runs < 1:
            raise DagDefinitionError("max_active_runs must be a positive integer", dag_id=dag_id)
        self.max_active_runs = max_active_runs
        self.default_args = _check_options(default_args or {}, dag_id=dag_id, task_id=None)
        self.tags = [str(t) for t in tags]
        #: Declared params in their stored form (:func:`dagrun.authoring.params.serialise`).
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
        #: Task groups by id (dagrun.authoring.groups); a group's id and a task's never coincide.
        self.groups: dict[str, TaskGroup] = {}
        #: The groups open here, innermost last: a task created now joins the innermost.
        self.open_groups: list[TaskGroup] = []
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
        if task.task_id in self.groups:
            raise DagDefinitionError(
                f"task id '{task.task_id}' is also a task group's id", dag_id=self.dag_id
            )
        self.tasks[task.task_id] = task

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
        """``base``, or ``base__2``, ``base__3``... when a @task function is called again
        (judged on the id the task will get, with its group's prefix)."""
        return first_free(base, lambda label: self.qualify(label) in self.tasks)


def first_free(base: str, taken: Callable[[str], bool]) -> str:
    """``base``, or the first of ``base__2``, ``base__3``... that is not ``taken``."""
    if not taken(base):
        return base
    n = 2
    while taken(f"{base}__{n}"):
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
    if checked.get("outlets") is not None:
        outlets = checked["outlets"]
        listed = outlets if isinstance(outlets, list | tuple) else [outlets]
        checked["outlets"] = asset_names(listed, "outlets", dag_id=dag_id, task_id=task_id)
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


def _resolve(other: Any, upstream: bool) -> list[Task]:
    """The tasks behind a ``>>`` operand on the upstream (or downstream) side of the edge: a
    task, an output, a task group, a @task function, a list of them."""
    if isinstance(other, DependencyMixin):
        return other.edge_tasks(upstream)
    if isinstance(other, TaskFunction):
        return [other.last_task()]
    if isinstance(other, list | tuple | set):
        return [t for item in other for t in _resolve(item, upstream)]
    raise TypeError(f"cannot set a dependency on {other!r}: expected a task or a list of tasks")


class DependencyMixin:
    """``a >> b``, ``a << b``, ``[a, b] >> c`` and ``c << [a, b]`` for tasks, their outputs
    and task groups (dagrun.authoring.groups)."""

    def edge_tasks(self, upstream: bool) -> list[Task]:
        """The tasks an edge attaches to with this operand on its upstream side (or its
        downstream side): only a task group's differ, its leaves or its roots."""
        raise NotImplementedError

    def __rshift__(self, other: Any) -> Any:
        for up in self.edge_tasks(upstream=True):
            for down in _resolve(other, upstream=False):
                down.add_upstream(up)
        return other

    def __lshift__(self, other: Any) -> Any:
        for down in self.edge_tasks(upstream=False):
            for up in _resolve(other, upstream=True):
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
    #: Whether a mapped task expands over this task's return value (which must be a list).
    feeds_mapping = False
    #: The arguments ``expand()`` maps over: a literal list or an upstream's output each.
    mapped: dict[str, Any] = {}

    def __init__(self, task_id: str, dag: DAG | None = None, **options: Any):
        dag = dag or current_dag()
        if dag is None:
            raise DagDefinitionError(
                "created outside a DAG: use `with DAG(...):` or pass dag=", task_id=task_id
            )
        # The id is not passed as task_id=: a bad one (with a newline) would be printed raw
        # in the message's prefix, and an import error keeps only its first line.
        self.task_id = check_id("task", dag.qualify(task_id), dag_id=dag.dag_id)
        #: The path of the task group it was created in (``outer.inner``), None outside any.
        self.group = dag.open_groups[-1].path if dag.open_groups else None
        self.dag = dag
        own = _check_options(options, dag_id=dag.dag_id, task_id=self.task_id)
        self.options = {**TASK_DEFAULTS, **dag.default_args, **own}
        self.upstream_ids: list[str] = []
        self._check_templates()
        dag.add_task(self)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.dag.dag_id}.{self.task_id}>"

    def edge_tasks(self, upstream: bool) -> list[Task]:
        return [self]

    def templated(self) -> dict[str, Any]:
        """The fields the runner renders as templates before an attempt, by name."""
        return {"params": self.options["params"]}

    def _check_templates(self) -> None:
        """Parse every template now, so that a syntax error or a name the context does not
        have fails the file's import instead of every attempt of the task."""
        for name, value in self.templated().items():
            for where, source in templates.sources(value, name):
                problem = templates.problem(source, CONTEXT_NAMES)
                if problem:
                    raise DagDefinitionError(
                        f"template in {where} {problem}",
                        dag_id=self.dag.dag_id,
                        task_id=self.task_id,
                    )

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
        """Upstream task ids whose return values this task receives (TaskFlow, or the
        lists it is mapped over)."""
        return _output_ids(self.mapped.values())

    def _check_mapped(self) -> None:
        """What ``expand()`` maps over: each a JSON list no longer than the limit, or the
        output of an upstream task (which must then return such a list)."""
        for name, value in self.mapped.items():
            if isinstance(value, TaskOutput):
                value.task.feeds_mapping = True
                continue
            problem = mapping.problem(value)
            if problem:
                raise DagDefinitionError(
                    f"expand: {name} {problem}", dag_id=self.dag.dag_id, task_id=self.task_id
                )
        for value in self.mapped.values():
            if isinstance(value, TaskOutput):
                self.add_upstream(value.task)


def _output_ids(values: Iterable[Any]) -> list[str]:
    """The ids of the tasks whose outputs are among ``values``."""
    return sorted({v.task.task_id for v in values if isinstance(v, TaskOutput)})


class BashTask(Task):
    """Runs a shell command (a Jinja2 template) in its own process group."""

    kind = "bash"

    def __init__(
        self,
        task_id: str,
        command: str | None = None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        dag: DAG | None = None,
        *,
        mapped: dict[str, Any] | None = None,
        **options: Any,
    ):
        self.mapped = dict(mapped or {})
        if "command" not in self.mapped and (not isinstance(command, str) or not command.strip()):
            raise DagDefinitionError("BashTask needs a non-empty command string", task_id=task_id)
        self.command = command or ""
        self.env = {str(k): str(v) for k, v in (env or {}).items()}
        self.cwd = cwd
        super().__init__(task_id, dag=dag, **options)
        self._check_mapped()
        self._check_mapped_elements()

    def _check_mapped_elements(self) -> None:
        """A literal list of commands holds non-empty strings; of environments, dicts."""
        wanted = {"command": (str, "a command string"), "env": (dict, "a dict of variables")}
        for name, value in self.mapped.items():
            kind, what = wanted[name]
            if isinstance(value, TaskOutput):
                continue
            for i, element in enumerate(value):
                if not isinstance(element, kind) or not element:
                    raise DagDefinitionError(
                        f"expand: {name}[{i}] must be {what}, not {element!r}",
                        dag_id=self.dag.dag_id,
                        task_id=self.task_id,
                    )

    @classmethod
    def partial(cls, task_id: str, **kwargs: Any) -> BashPartial:
        """Fix what every mapped instance shares; ``expand(command=[...])`` (or ``env=``)
        maps the rest."""
        return BashPartial(task_id, kwargs)

    def templated(self) -> dict[str, Any]:
        literal = {k: v for k, v in self.mapped.items() if not isinstance(v, TaskOutput)}
        return {**super().templated(), "command": self.command, "env": self.env, **literal}


class BashPartial:
    """``BashTask.partial("t", env=...)``: a mapped BashTask waiting for ``expand``."""

    #: The arguments a BashTask may be mapped over.
    MAPPABLE = ("command", "env")

    def __init__(self, task_id: str, kwargs: dict[str, Any]):
        self.task_id = task_id
        self.kwargs = kwargs

    def expand(self, **mapped: Any) -> BashTask:
        unknown = sorted(set(mapped) - set(self.MAPPABLE)) or ([] if mapped else ["(none)"])
        if unknown:
            raise DagDefinitionError(
                f"expand: BashTask has no argument {unknown[0]!r} to map "
                f"(it maps {' or '.join(self.MAPPABLE)})",
                task_id=self.task_id,
            )
        return BashTask(self.task_id, mapped=mapped, **self.kwargs)


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
        *,
        choice: str | None = None,
        mapped: dict[str, Any] | None = None,
        sensor: Mapping[str, Any] | None = None,
        **options: Any,
    ):
        self.python_callable = python_callable
        self.args = tuple(args)
        self.kwargs = dict(kwargs or {})
        #: ``"branch"`` or ``"short_circuit"`` (``@task.branch``, ``@task.short_circuit``).
        self.choice = choice
        self.mapped = dict(mapped or {})
        super().__init__(task_id, dag=dag, **options)
        #: A sensor's options (its callable is poked until it returns truthy); else None.
        self.sensor = (
            None
            if sensor is None
            else sensor_spec(sensor, dag_id=self.dag.dag_id, task_id=self.task_id)
        )
        self._check_signature()
        self._check_mapped()
        for value in (*self.args, *self.kwargs.values()):
            if isinstance(value, TaskOutput):
                self.add_upstream(value.task)

    def _check_signature(self) -> None:
        """Every parameter not bound by the call must be a context name or have a default."""
        signature = inspect.signature(self.python_callable)
        try:
            bound = signature.bind_partial(*self.args, **self.kwargs, **self.mapped)
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
        return _output_ids((*self.args, *self.kwargs.values(), *self.mapped.values()))


class TaskOutput(DependencyMixin):
    """The future return value of a task: pass it to another task call to depend on it."""

    def __init__(self, task: Task):
        self.task = task

    def __repr__(self) -> str:
        return f"<output of {self.task.task_id}>"

    def edge_tasks(self, upstream: bool) -> list[Task]:
        return [self.task]


class TaskFunction:
    """What ``@task`` returns: calling it inside a DAG adds a task and returns its output;
    ``partial(...)`` and ``expand(...)`` add a mapped task."""

    def __init__(
        self, function: Callable[..., Any], options: dict[str, Any], choice: str | None = None
    ):
        self.function = function
        self.task_id = options.pop("task_id", None) or function.__name__
        self.options = options
        self.choice = choice
        self.tasks: list[PythonTask] = []
        self.__doc__ = function.__doc__
        self.__name__ = function.__name__

    def __call__(self, *args: Any, **kwargs: Any) -> TaskOutput:
        return self._add(args, kwargs, {})

    def partial(self, **kwargs: Any) -> PartialCall:
        """Fix the arguments every mapped instance shares; ``expand`` maps the rest."""
        return PartialCall(self, kwargs)

    def expand(self, **mapped: Any) -> TaskOutput:
        """One task instance per element of each list (the product of them when several),
        each a list or an upstream task's output; downstream tasks get the results as a
        list in index order."""
        return self._add((), {}, mapped)

    def _add(self, args: tuple, kwargs: dict[str, Any], mapped: dict[str, Any]) -> TaskOutput:
        dag = current_dag()
        if dag is None:
            raise DagDefinitionError(
                "called outside a DAG: call @task functions inside `with DAG(...):`",
                task_id=self.task_id,
            )
        if self.choice and mapped:
            raise DagDefinitionError(f"a {self.choice} task cannot be mapped", task_id=self.task_id)
        task_id = dag.unique_task_id(self.task_id)
        created = PythonTask(
            task_id,
            self.function,
            args,
            kwargs,
            dag=dag,
            choice=self.choice,
            mapped=mapped,
            **self.options,
        )
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


class PartialCall:
    """``f.partial(x=1)``: the constant arguments of a mapped task, waiting for ``expand``."""

    def __init__(self, function: TaskFunction, kwargs: dict[str, Any]):
        self.function = function
        self.kwargs = kwargs

    def expand(self, **mapped: Any) -> TaskOutput:
        return self.function._add((), self.kwargs, mapped)


def task(function: Callable[..., Any] | None = None, **options: Any) -> Any:
    """Decorate a function as a task: ``@task`` or ``@task(retries=5, trigger_rule=...)``."""
    return _decorator(function, options, None)


def _decorator(function: Callable[..., Any] | None, options: dict[str, Any], choice: str | None):
    if function is not None:
        return TaskFunction(function, options, choice)
    return lambda f: TaskFunction(f, dict(options), choice)


def _branch(function: Callable[..., Any] | None = None, **options: Any) -> Any:
    """``@task.branch``: the function returns the task id (or a list of them, or None) of
    the direct downstream tasks to run; the others are skipped."""
    return _decorator(function, options, "branch")


def _short_circuit(function: Callable[..., Any] | None = None, **options: Any) -> Any:
    """``@task.short_circuit``: a falsy return value skips every task downstream of it,
    whatever their trigger rules; a truthy one changes nothing."""
    return _decorator(function, options, "short_circuit")


def _sensor(function: Callable[..., Any] | None = None, **options: Any) -> Any:
    """``@task.sensor(poke_interval=60, timeout=3600, mode="reschedule", soft_fail=False)``:
    the function returns truthy once its condition holds, and is poked every
    ``poke_interval`` until then, for at most ``timeout`` from its first poke."""
    sensor, rest = split_sensor_options(options)
    return _decorator(function, {**rest, "sensor": sensor}, None)


def split_sensor_options(options: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A sensor's own options (``SENSOR_DEFAULTS``) apart from its task options."""
    sensor = {k: v for k, v in options.items() if k in SENSOR_DEFAULTS}
    return sensor, {k: v for k, v in options.items() if k not in SENSOR_DEFAULTS}


def sensor_spec(options: Mapping[str, Any], *, dag_id: str, task_id: str) -> SensorSpec:
    """A sensor's options checked (an error naming the task) and completed with defaults;
    durations are seconds, a timedelta or text such as "5m"."""
    given = {**SENSOR_DEFAULTS, **options}
    seconds = {}
    for name in ("poke_interval", "timeout"):
        try:
            seconds[name] = parse_duration(given[name]).total_seconds()
        except Exception as exc:
            raise DagDefinitionError(f"{name}: {exc}", dag_id=dag_id, task_id=task_id) from None
        if seconds[name] <= 0:
            raise DagDefinitionError(
                f"{name} must be positive, not {given[name]!r}", dag_id=dag_id, task_id=task_id
            )
    try:
        mode = SensorMode(given["mode"])
    except ValueError:
        modes = " or ".join(repr(m.value) for m in SensorMode)
        raise DagDefinitionError(
            f"mode must be {modes}, not {given['mode']!r}", dag_id=dag_id, task_id=task_id
        ) from None
    if not isinstance(given["soft_fail"], bool):
        raise DagDefinitionError(
            f"soft_fail must be True or False, not {given['soft_fail']!r}",
            dag_id=dag_id,
            task_id=task_id,
        )
    return SensorSpec(seconds["poke_interval"], seconds["timeout"], mode.value, given["soft_fail"])


task.branch = _branch  # type: ignore[attr-defined]
task.short_circuit = _short_circuit  # type: ignore[attr-defined]
task.sensor = _sensor  # type: ignore[attr-defined]

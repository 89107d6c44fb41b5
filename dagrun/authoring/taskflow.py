"""The TaskFlow API: ``@task`` and its variants ``@task.branch``, ``@task.short_circuit``,
``@task.sensor``, and ``@task.virtualenv`` / ``@task.external_python`` (and their branch
forms) for functions that run in another Python environment; ``@setup`` and ``@teardown``
for tasks that make and remove a resource.

A decorated function is a ``TaskFunction``: each call inside a DAG adds a ``PythonTask`` and
returns its ``TaskOutput``, and ``partial``/``expand`` add a mapped one. Apart from the task
classes (``dagrun.authoring.tasks``) because it is the one way in that builds tasks from
calls, with its own rules (unique ids per call, outputs as arguments).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from typing import Any

from dagrun.authoring.dag import current_dag
from dagrun.authoring.dependencies import DependencyMixin
from dagrun.authoring.options import split_sensor_options
from dagrun.authoring.python_environments import external_environment, virtualenv_environment
from dagrun.authoring.tasks import KWARGS, PythonTask, Task, TaskOutput
from dagrun.errors import DagDefinitionError


class TaskFunction(DependencyMixin):
    """What ``@task`` returns: calling it inside a DAG adds a task and returns its output;
    ``partial(...)`` and ``expand(...)`` add a mapped task."""

    def __init__(
        self,
        function: Callable[..., Any],
        options: dict[str, Any],
        choice: str | None = None,
        task_class: type[PythonTask] = PythonTask,
    ):
        self.function = function
        self.task_id = options.pop("task_id", None) or function.__name__
        self.options = options
        self.choice = choice
        #: What each call makes (``dagrun.airflow``'s @task makes its own kind).
        self.task_class = task_class
        #: ``"setup"`` or ``"teardown"`` (``@setup``, ``@teardown``): what each task it adds is.
        self.role: str | None = None
        self.on_failure_fail_dagrun = False
        self.tasks: list[PythonTask] = []
        self.__doc__ = function.__doc__
        self.__name__ = function.__name__

    def __call__(self, *args: Any, **kwargs: Any) -> TaskOutput:
        return self._add(args, kwargs, {})

    def override(self, **options: Any) -> TaskFunction:
        """The same function with some options changed (``task_id`` included), for the
        calls made through what it returns: ``load.override(task_id="load_eu")(...)``."""
        merged = {**self.options, "task_id": self.task_id, **options}
        made = TaskFunction(self.function, merged, self.choice, self.task_class)
        made.role, made.on_failure_fail_dagrun = self.role, self.on_failure_fail_dagrun
        return made

    def partial(self, **kwargs: Any) -> PartialCall:
        """Fix the arguments every mapped instance shares; ``expand`` maps the rest."""
        return PartialCall(self, kwargs)

    def expand_kwargs(self, values: Any) -> TaskOutput:
        """One task instance per element of ``values`` (a list, or an upstream task's
        output), each a dict of the keyword arguments that instance is called with."""
        return self._add((), {}, {KWARGS: values})

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
        created = self.task_class(
            task_id,
            self.function,
            args,
            kwargs,
            dag=dag,
            choice=self.choice,
            mapped=mapped,
            **self.options,
        )
        if self.role == "setup":
            created.as_setup()
        elif self.role == "teardown":
            created.as_teardown(on_failure_fail_dagrun=self.on_failure_fail_dagrun)
        self.tasks.append(created)
        return created.output

    def last_task(self) -> Task:
        if not self.tasks:
            raise DagDefinitionError(
                "used in a dependency before it was called; write `name()` to create the task",
                task_id=self.task_id,
            )
        return self.tasks[-1]

    def edge_tasks(self, upstream: bool) -> list[Task]:
        """The task its last call added, on either side of an edge."""
        return [self.last_task()]


class PartialCall:
    """``f.partial(x=1)``: the constant arguments of a mapped task, waiting for ``expand``."""

    def __init__(self, function: TaskFunction, kwargs: dict[str, Any]):
        self.function = function
        self.kwargs = kwargs

    def expand(self, **mapped: Any) -> TaskOutput:
        return self.function._add((), self.kwargs, mapped)

    def expand_kwargs(self, values: Any) -> TaskOutput:
        return self.function._add((), self.kwargs, {KWARGS: values})


def task(function: Callable[..., Any] | None = None, **options: Any) -> Any:
    """Decorate a function as a task: ``@task`` or ``@task(retries=5, trigger_rule=...)``."""
    return decorator(function, options, None)


def decorator(
    function: Callable[..., Any] | None,
    options: dict[str, Any],
    choice: str | None,
    task_class: type[PythonTask] = PythonTask,
) -> Any:
    """``@name`` or ``@name(...)``: a ``TaskFunction`` making ``task_class`` tasks, or the
    decorator that makes one."""
    if function is not None:
        return TaskFunction(function, dict(options), choice, task_class)
    return lambda f: TaskFunction(f, dict(options), choice, task_class)


def _branch(function: Callable[..., Any] | None = None, **options: Any) -> Any:
    """``@task.branch``: the function returns the task id (or a list of them, or None) of
    the direct downstream tasks to run; the others are skipped."""
    return decorator(function, options, "branch")


def _short_circuit(
    function: Callable[..., Any] | None = None,
    *,
    ignore_downstream_trigger_rules: bool = True,
    **options: Any,
) -> Any:
    """``@task.short_circuit``: a falsy return value skips every task downstream of it,
    whatever their trigger rules; with ``ignore_downstream_trigger_rules=False`` only its
    direct downstream tasks, the tasks after them following their own rules. A truthy one
    changes nothing. Teardowns are never skipped by it."""
    options = {**options, "ignore_downstream_trigger_rules": ignore_downstream_trigger_rules}
    return decorator(function, options, "short_circuit")


def _sensor(function: Callable[..., Any] | None = None, **options: Any) -> Any:
    """``@task.sensor(poke_interval=60, timeout=3600, mode="reschedule", soft_fail=False)``:
    the function returns truthy once its condition holds, and is poked every
    ``poke_interval`` until then, for at most ``timeout`` from its first poke."""
    sensor, rest = split_sensor_options(options)
    return decorator(function, {**rest, "sensor": sensor}, None)


def _virtualenv(function: Callable[..., Any] | None = None, **options: Any) -> Any:
    """``@task.virtualenv(requirements=[...], python_version=None, system_site_packages=False,
    pip_install_options=None, index_urls=None, venv_cache_path=None, serializer="pickle",
    string_args=None, env_vars=None, inherit_env=True, skip_on_exit_code=None)``: the
    function runs in a virtual environment made once for these requirements; it receives
    its arguments and the context names it declares (plain values only), and its return
    value comes back. Other options are the task's (``retries``, ``templates_dict`` ...)."""
    return elsewhere(function, options, virtualenv_environment, None)


def _external_python(function: Callable[..., Any] | None = None, **options: Any) -> Any:
    """``@task.external_python(python="/path/to/python", serializer="pickle", ...)``: as
    ``@task.virtualenv``, in an interpreter already installed."""
    return elsewhere(function, options, external_environment, None)


def _branch_virtualenv(function: Callable[..., Any] | None = None, **options: Any) -> Any:
    """``@task.branch_virtualenv(...)``: a branch whose function runs as ``@task.virtualenv``."""
    return elsewhere(function, options, virtualenv_environment, "branch")


def _branch_external_python(function: Callable[..., Any] | None = None, **options: Any) -> Any:
    """``@task.branch_external_python(python=...)``: a branch run as ``@task.external_python``."""
    return elsewhere(function, options, external_environment, "branch")


def elsewhere(
    function: Callable[..., Any] | None,
    options: dict[str, Any],
    make: Callable[..., Any],
    choice: str | None,
    task_class: type[PythonTask] = PythonTask,
) -> Any:
    """A decorator whose tasks run their function in the environment ``make`` builds from
    its own options (the rest are task options). Built once per decorated function, so a
    bad option is an error of the decoration, naming the function's task id."""
    names = set(inspect.signature(make).parameters) - {"task_id", "folder"}
    own = {k: v for k, v in options.items() if k in names}
    rest = {k: v for k, v in options.items() if k not in names}

    def decorate(f: Callable[..., Any]) -> TaskFunction:
        where: dict[str, Any] = {"task_id": rest.get("task_id") or getattr(f, "__name__", None)}
        if make is virtualenv_environment:
            code = getattr(f, "__code__", None)
            where["folder"] = os.path.dirname(code.co_filename) if code else None
        return TaskFunction(f, {**rest, "environment": make(**own, **where)}, choice, task_class)

    return decorate(function) if function is not None else decorate


task.branch = _branch  # type: ignore[attr-defined]
task.short_circuit = _short_circuit  # type: ignore[attr-defined]
task.sensor = _sensor  # type: ignore[attr-defined]
task.virtualenv = _virtualenv  # type: ignore[attr-defined]
task.external_python = _external_python  # type: ignore[attr-defined]
task.branch_virtualenv = _branch_virtualenv  # type: ignore[attr-defined]
task.branch_external_python = _branch_external_python  # type: ignore[attr-defined]


def setup(function: Any = None, **options: Any) -> Any:
    """``@setup``: each task the function adds is a setup task (``Task.as_setup``), one that
    makes a resource for the work after it. Takes ``@task``'s options, or goes above a
    ``@task``-decorated function."""
    return _role(function, options, "setup", False)


def teardown(function: Any = None, *, on_failure_fail_dagrun: bool = False, **options: Any) -> Any:
    """``@teardown``: each task the function adds is a teardown task (``Task.as_teardown``):
    it runs once its upstream tasks finished if one of its setups succeeded, and its failure
    fails the run only with ``on_failure_fail_dagrun=True``. Its trigger rule is not an
    option; link its setups with ``out.as_teardown(setups=...)`` or ``setup >> out``."""
    return _role(function, options, "teardown", on_failure_fail_dagrun)


def _role(function: Any, options: dict[str, Any], role: str, fail_run: bool) -> Any:
    if function is None:
        return lambda f: _role(f, options, role, fail_run)
    made = function if isinstance(function, TaskFunction) else TaskFunction(function, dict(options))
    if isinstance(function, TaskFunction) and options:
        raise DagDefinitionError(
            f"@{role} above @task takes no options of its own: give them to @task",
            task_id=made.task_id,
        )
    if role == "teardown" and "trigger_rule" in made.options:
        raise DagDefinitionError(
            "a teardown's trigger rule is all_done_setup_success and is not an option",
            task_id=made.task_id,
        )
    if not isinstance(fail_run, bool):
        raise DagDefinitionError(
            f"on_failure_fail_dagrun must be True or False, not {fail_run!r}",
            task_id=made.task_id,
        )
    made.role = role
    made.on_failure_fail_dagrun = fail_run
    return made

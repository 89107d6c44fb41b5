"""Airflow's TaskFlow decorators: ``@task`` and its variants (``.python``, ``.branch``,
``.short_circuit``, ``.bash``, ``.sensor``, ``.virtualenv``, ``.external_python``) and
``@task_group``, over dagrun's own ``@task`` (``dagrun.authoring.taskflow``).

Each call of a decorated function makes an ``AirflowPythonTask``: dagrun's Python task with
Airflow's task arguments (``dagrun.airflow.arguments``), the DAG's ``default_args``, every
context name through ``**kwargs``, and ``multiple_outputs`` inferred from a ``dict`` return
annotation as Airflow infers it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from dagrun.airflow import arguments as args_
from dagrun.airflow.operators import (
    AirflowTask,
    Prepared,
    airflow_options,
    default_args_for,
    in_group,
)
from dagrun.airflow.structure import TaskGroup
from dagrun.airflow.templating import read_template_file
from dagrun.airflow.virtualenv import serializer
from dagrun.authoring import groups
from dagrun.authoring.dag import DAG, current_dag
from dagrun.authoring.options import split_sensor_options
from dagrun.authoring.python_environments import (
    external_environment,
    virtualenv_environment,
)
from dagrun.authoring.taskflow import TaskFunction, decorator, elsewhere
from dagrun.authoring.taskflow import setup as native_setup
from dagrun.authoring.taskflow import teardown as native_teardown
from dagrun.authoring.tasks import PythonTask
from dagrun.runtime import current
from dagrun.runtime.rendering import render_with
from dagrun.runtime.task_calls import run_shell

#: The keyword arguments of dagrun's ``PythonTask`` (the decorators pass them: ``choice``,
#: ``mapped``, ``sensor``, ``environment`` ...), passed on as they are; the others of a
#: call are Airflow's task arguments.
NATIVE_KEYWORDS = frozenset(
    name
    for name, parameter in inspect.signature(PythonTask.__init__).parameters.items()
    if parameter.kind == parameter.KEYWORD_ONLY
)


class AirflowPythonTask(AirflowTask, PythonTask):
    """What a call of an Airflow ``@task`` function makes."""

    kind = "@task"

    def __init__(
        self,
        task_id: str,
        python_callable: Callable[..., Any],
        args: tuple = (),
        kwargs: dict[str, Any] | None = None,
        dag: DAG | None = None,
        *,
        multiple_outputs: bool | None = None,
        task_group: groups.TaskGroup | None = None,
        templates_dict: dict[str, Any] | None = None,
        templates_exts: Sequence[str] | None = None,
        **arguments: Any,
    ):
        native = {k: arguments.pop(k) for k in NATIVE_KEYWORDS & arguments.keys()}
        defaults = default_args_for(dag or current_dag(), None)
        made = airflow_options(
            "@task", task_id, dag, args_.with_defaults(None, arguments, defaults)
        )
        if multiple_outputs is None:
            multiple_outputs = returns_dict(python_callable)
        if templates_dict and templates_exts:
            templates_dict = _read_files(templates_dict, tuple(templates_exts), made)
        made.attributes.pop("multiple_outputs", None)
        with in_group(made.dag, task_group):
            super().__init__(
                made.task_id,
                python_callable,
                args,
                kwargs,
                made.dag,
                multiple_outputs=multiple_outputs,
                templates_dict=templates_dict,
                **native,
                **made.natives,
            )
        self.keep(made.attributes)


def _read_files(
    templates: dict[str, Any], extensions: tuple[str, ...], made: Prepared
) -> dict[str, Any]:
    """``templates_dict`` with each value naming a template file (``templates_exts``)
    replaced by the file's text, read when the file is parsed as template fields are."""
    return {
        key: read_template_file(value, made.dag)
        if isinstance(value, str) and value.endswith(extensions)
        else value
        for key, value in templates.items()
    }


def returns_dict(function: Callable[..., Any]) -> bool:
    """Whether a function's return annotation is a dict (Airflow then pushes each key)."""
    annotation = inspect.signature(function).return_annotation
    if isinstance(annotation, str):
        return annotation.replace("typing.", "").startswith(("dict", "Dict"))
    return annotation is dict or getattr(annotation, "__origin__", None) is dict


def task(python_callable: Callable[..., Any] | None = None, **options: Any) -> Any:
    """``@task`` or ``@task(task_id=..., retries=..., multiple_outputs=...)``."""
    return decorator(python_callable, options, None, AirflowPythonTask)


def _branch(python_callable: Callable[..., Any] | None = None, **options: Any) -> Any:
    """``@task.branch``: returns the direct downstream task id(s) to run."""
    return decorator(python_callable, options, "branch", AirflowPythonTask)


def _short_circuit(python_callable: Callable[..., Any] | None = None, **options: Any) -> Any:
    """``@task.short_circuit``: a falsy value skips what is downstream."""
    return decorator(python_callable, options, "short_circuit", AirflowPythonTask)


def _sensor(python_callable: Callable[..., Any] | None = None, **options: Any) -> Any:
    """``@task.sensor(poke_interval=..., timeout=..., mode=...)``: poked until it returns
    a truthy value (or a ``PokeReturnValue`` that is done)."""
    from dagrun.airflow.sensors import sensor_options, unwrapped

    sensor, rest = split_sensor_options(sensor_options(options))

    def make(function: Callable[..., Any]) -> TaskFunction:
        return TaskFunction(
            unwrapped(function, options), {**rest, "sensor": sensor}, None, AirflowPythonTask
        )

    return make if python_callable is None else make(python_callable)


#: ``@task.bash``'s options of the shell, besides the task arguments.
BASH_OPTIONS = ("env", "append_env", "output_encoding", "skip_on_exit_code", "cwd")


def _bash(python_callable: Callable[..., Any] | None = None, **options: Any) -> Any:
    """``@task.bash``: the function returns a bash command (a template), which runs as a
    ``BashOperator``'s would."""
    shell = {k: options.pop(k) for k in BASH_OPTIONS if k in options}

    def make(function: Callable[..., Any]) -> TaskFunction:
        return TaskFunction(_command_of(function, shell), dict(options), None, AirflowPythonTask)

    return make if python_callable is None else make(python_callable)


def _command_of(function: Callable[..., Any], shell: dict[str, Any]) -> Callable[..., Any]:
    """A callable running the command ``function`` returns, with its parameters."""

    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> str | None:
        command = function(*args, **kwargs)
        if not isinstance(command, str) or not command.strip():
            raise TypeError(f"@task.bash must return a non-empty command, not {command!r}")
        context = current.current()
        assert context is not None  # the runner sets it for the attempt
        env = shell.get("env")
        skip = shell.get("skip_on_exit_code", 99)
        return run_shell(
            render_with(command, context),
            context,
            render_with({str(k): str(v) for k, v in (env or {}).items()}, context),
            cwd=render_with(shell.get("cwd"), context),
            inherit_env=bool(shell.get("append_env")) or env is None,
            skip_on_exit_code=[] if skip is None else [skip] if isinstance(skip, int) else skip,
            last_line_encoding=shell.get("output_encoding", "utf-8"),
        )

    return run


def _virtualenv(python_callable: Callable[..., Any] | None = None, **options: Any) -> Any:
    """``@task.virtualenv(requirements=[...], ...)``: Airflow's default is
    ``system_site_packages=True``."""
    options = serializer(options)
    options.setdefault("system_site_packages", True)
    return elsewhere(python_callable, options, virtualenv_environment, None, AirflowPythonTask)


def _external_python(python_callable: Callable[..., Any] | None = None, **options: Any) -> Any:
    """``@task.external_python(python="/path/to/python", ...)``."""
    options = serializer(options)
    return elsewhere(python_callable, options, external_environment, None, AirflowPythonTask)


def _branch_virtualenv(python_callable: Callable[..., Any] | None = None, **options: Any) -> Any:
    """``@task.branch_virtualenv(...)``: a branch run as ``@task.virtualenv`` runs."""
    options = serializer(options)
    options.setdefault("system_site_packages", True)
    return elsewhere(python_callable, options, virtualenv_environment, "branch", AirflowPythonTask)


def _branch_external_python(
    python_callable: Callable[..., Any] | None = None, **options: Any
) -> Any:
    """``@task.branch_external_python(python=...)``: a branch run as
    ``@task.external_python`` runs."""
    options = serializer(options)
    return elsewhere(python_callable, options, external_environment, "branch", AirflowPythonTask)


task.python = task  # type: ignore[attr-defined]
task.branch = _branch  # type: ignore[attr-defined]
task.short_circuit = _short_circuit  # type: ignore[attr-defined]
task.sensor = _sensor  # type: ignore[attr-defined]
task.bash = _bash  # type: ignore[attr-defined]
task.virtualenv = _virtualenv  # type: ignore[attr-defined]
task.external_python = _external_python  # type: ignore[attr-defined]
task.branch_virtualenv = _branch_virtualenv  # type: ignore[attr-defined]
task.branch_external_python = _branch_external_python  # type: ignore[attr-defined]


def task_group(
    python_callable: Callable[..., Any] | None = None,
    *,
    group_id: str | None = None,
    prefix_group_id: bool = True,
    tooltip: str = "",
    default_args: dict[str, Any] | None = None,
    add_suffix_on_collision: bool = False,
    **ui: Any,
) -> Any:
    """``@task_group``: each call of the function opens a group (``name``, then
    ``name__1``...), builds its tasks in it and returns what the function returns (the
    group when that is None)."""
    options = {
        "tooltip": tooltip,
        "prefix_group_id": prefix_group_id,
        "default_args": default_args,
    }

    def make(function: Callable[..., Any]) -> groups.TaskGroupFunction:
        return groups.TaskGroupFunction(function, group_id, options, TaskGroup)

    return make if python_callable is None else make(python_callable)


def setup(python_callable: Callable[..., Any] | None = None, **options: Any) -> Any:
    """``@setup`` (directly, or above ``@task``): each task the function adds is a setup."""
    if python_callable is None:
        return lambda f: setup(f, **options)
    made = python_callable if isinstance(python_callable, TaskFunction) else task(**options)
    return native_setup(made if made is python_callable else made(python_callable))


def teardown(
    python_callable: Callable[..., Any] | None = None,
    *,
    on_failure_fail_dagrun: bool = False,
    **options: Any,
) -> Any:
    """``@teardown`` (directly, or above ``@task``): each task the function adds is a
    teardown, whose failure fails the run only with ``on_failure_fail_dagrun``."""
    if python_callable is None:
        return lambda f: teardown(f, on_failure_fail_dagrun=on_failure_fail_dagrun, **options)
    made = python_callable if isinstance(python_callable, TaskFunction) else task(**options)
    function = made if made is python_callable else made(python_callable)
    return native_teardown(function, on_failure_fail_dagrun=on_failure_fail_dagrun)

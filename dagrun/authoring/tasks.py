"""The tasks: ``Task`` and its kinds (``PythonTask``, ``BashTask`` and its ``partial``), and
``TaskOutput``, the future return value that TaskFlow passes between them.

A task joins the current DAG (``dagrun.authoring.dag``) when it is created, checks its
options, templates and mapped arguments there, and records its upstream tasks; what running
it means is the runner's (``dagrun.runtime.task_calls``). ``@task`` builds ``PythonTask``
values (``dagrun.authoring.taskflow``).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from dagrun.authoring import mapping, setup_teardown, templates
from dagrun.authoring.context_names import (
    ALL_CONTEXT_NAMES,
    CONTEXT_NAMES,
    PORTABLE_CONTEXT_NAMES,
    TEMPLATES_DICT,
)
from dagrun.authoring.dag import check_id, current_dag
from dagrun.authoring.dependencies import DependencyMixin
from dagrun.authoring.options import TASK_DEFAULTS, check_options, sensor_spec
from dagrun.authoring.python_environments import (
    FunctionSource,
    PythonEnvironment,
    function_source,
)
from dagrun.authoring.sensor_options import SensorSpec
from dagrun.errors import DagDefinitionError

if TYPE_CHECKING:
    from dagrun.authoring.dag import DAG


def _option(name: str) -> Any:
    """A task option as an attribute: read from the task's options, and checked when set
    after the task was made (``t.trigger_rule = "all_done"``, as Airflow files do)."""

    def get(task: Task) -> Any:
        return task.options[name]

    def set_(task: Task, value: Any) -> None:
        checked = check_options({name: value}, dag_id=task.dag.dag_id, task_id=task.task_id)
        if name == "trigger_rule" and task.is_teardown and checked[name] != task.trigger_rule:
            raise DagDefinitionError(
                f"a teardown's trigger rule is {task.trigger_rule}, not {checked[name]!r}",
                dag_id=task.dag.dag_id,
                task_id=task.task_id,
            )
        task.options[name] = checked[name]

    return property(get, set_, doc=f"The task's ``{name}`` option.")


class Task(DependencyMixin):
    """One node of the graph. Subclasses say what running it means."""

    kind = "task"
    #: The context names a callable taking ``**kwargs`` receives (a task made by
    #: ``dagrun.airflow`` gets Airflow's too); a parameter named after any context name
    #: gets its value whatever this says.
    context_names: tuple[str, ...] = CONTEXT_NAMES
    trigger_rule = _option("trigger_rule")
    retries = _option("retries")
    retry_delay = _option("retry_delay")
    execution_timeout = _option("execution_timeout")
    depends_on_past = _option("depends_on_past")
    priority_weight = _option("priority_weight")
    pool = _option("pool")
    outlets = _option("outlets")
    params = _option("params")
    #: Whether a mapped task expands over this task's return value (which must be a list).
    feeds_mapping = False
    #: The arguments ``expand()`` maps over: a literal list or an upstream's output each.
    mapped: dict[str, Any] = {}
    #: ``"branch"`` or ``"short_circuit"`` for a task whose value picks its downstream.
    choice: str | None = None
    #: A sensor's options (its condition is poked until it holds); None for other tasks.
    sensor: SensorSpec | None = None
    #: A dict it returns is also pushed key by key, each pulled as ``output["key"]``.
    multiple_outputs = False
    #: A short-circuit's reach: everything downstream (True) or its direct downstream only.
    ignore_downstream_trigger_rules = True
    #: Set by ``as_setup()`` and ``as_teardown()`` (``dagrun.authoring.setup_teardown``).
    is_setup = False
    is_teardown = False
    _fail_run = False

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
        own = check_options(options, dag_id=dag.dag_id, task_id=self.task_id)
        self.options = {**TASK_DEFAULTS, **dag.default_args, **own}
        self.upstream_ids: list[str] = []
        self._check_templates()
        dag.add_task(self)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.dag.dag_id}.{self.task_id}>"

    def edge_tasks(self, upstream: bool) -> list[Task]:
        return [self]

    @property
    def output(self) -> TaskOutput:
        """Its return value, to pass to another task (what a @task call returns)."""
        return TaskOutput(self)

    def as_setup(self) -> Task:
        """Mark this task as a setup (it makes a resource); returns the task, to chain."""
        setup_teardown.mark_setup(self)
        return self

    def as_teardown(
        self, *, setups: Any = None, on_failure_fail_dagrun: bool | None = None
    ) -> Task:
        """Mark this task as a teardown: it runs once its upstream tasks finished, whatever
        their states, if one of its setups succeeded. ``setups`` (a task, an output or a
        list) become setups upstream of it. Its failure fails the run only with
        ``on_failure_fail_dagrun=True`` (None leaves the task's setting as it is)."""
        setup_teardown.mark_teardown(self, setups, on_failure_fail_dagrun)
        return self

    @property
    def on_failure_fail_dagrun(self) -> bool:
        """Whether this teardown's failure fails the run (only a teardown may say so)."""
        return self._fail_run

    @on_failure_fail_dagrun.setter
    def on_failure_fail_dagrun(self, value: Any) -> None:
        if not isinstance(value, bool) or (value and not self.is_teardown):
            raise DagDefinitionError(
                f"on_failure_fail_dagrun must be True or False, not {value!r}"
                if not isinstance(value, bool)
                else "on_failure_fail_dagrun=True needs a teardown task (as_teardown())",
                dag_id=self.dag.dag_id,
                task_id=self.task_id,
            )
        self._fail_run = value

    def __enter__(self) -> setup_teardown.Scope:
        """``with teardown:`` (or ``with setup:``): the tasks made in the block are the
        work between its setups and its teardowns."""
        return setup_teardown.open_scope(self)

    def __exit__(self, kind: object, *exc: object) -> None:
        setup_teardown.close_scope(self, failed=kind is not None)

    def templated(self) -> dict[str, Any]:
        """The fields the runner renders as templates before an attempt, by name."""
        return {"params": self.options["params"]}

    def template_names(self) -> Collection[str]:
        """The names this task's templates may use."""
        return ALL_CONTEXT_NAMES

    def template_environment(self) -> Any:
        """The Jinja environment its templates are checked and rendered in (None: dagrun's
        own)."""
        return None

    def template_globals(self) -> dict[str, Any]:
        """Names its templates see besides the context's."""
        return {}

    def _check_templates(self) -> None:
        """Parse every template now, so that a syntax error or a name the context does not
        have fails the file's import instead of every attempt of the task."""
        for name, value in self.templated().items():
            for where, source in templates.sources(value, name):
                problem = templates.problem(
                    source, self.template_names(), self.template_environment()
                )
                if problem:
                    raise DagDefinitionError(
                        f"template in {where} {problem}",
                        dag_id=self.dag.dag_id,
                        task_id=self.task_id,
                    )

    def run_attempt(self, context: Any, inputs: dict[str, Any], elements: dict[str, Any]) -> Any:
        """What an attempt of a task of its own kind does, given the attempt's context (a
        ``dagrun.runtime.context.TaskContext``), its upstream values and its mapped
        elements; the runner runs python and bash tasks itself."""
        raise TypeError(f"cannot run task of type {type(self).__name__}")

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
            if problem is None and name == KWARGS:
                problem = mapping.kwargs_problem(value)
            if problem:
                what = "expand_kwargs: the list" if name == KWARGS else f"expand: {name}"
                raise DagDefinitionError(
                    f"{what} {problem}", dag_id=self.dag.dag_id, task_id=self.task_id
                )
        for value in self.mapped.values():
            if isinstance(value, TaskOutput):
                self.add_upstream(value.task)


def _output_ids(values: Iterable[Any]) -> list[str]:
    """The ids of the tasks whose outputs are among ``values``."""
    return sorted({v.task.task_id for v in values if isinstance(v, TaskOutput)})


class BashTask(Task):
    """Runs a shell command (a Jinja2 template) in its own process group.

    ``env`` is added to the worker's environment, or with ``append_env=False`` replaces it
    (only dagrun's variables and ``env`` are set). An exit code in ``skip_on_exit_code``
    ends the task skipped instead of failed. With ``return_last_line`` the last line the
    command writes (decoded with ``output_encoding``) is the task's return value.
    """

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
        skip_on_exit_code: int | Iterable[int] | None = None,
        append_env: bool = True,
        output_encoding: str = "utf-8",
        return_last_line: bool = False,
        **options: Any,
    ):
        self.mapped = dict(mapped or {})
        if "command" not in self.mapped and (not isinstance(command, str) or not command.strip()):
            raise DagDefinitionError("BashTask needs a non-empty command string", task_id=task_id)
        self.command = command or ""
        self.env = {str(k): str(v) for k, v in (env or {}).items()}
        self.cwd = cwd
        self.skip_on_exit_code = _exit_codes(skip_on_exit_code, task_id)
        self.append_env = bool(append_env)
        self.output_encoding = output_encoding
        self.return_last_line = bool(return_last_line)
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


def _exit_codes(value: int | Iterable[int] | None, task_id: str) -> frozenset[int]:
    """``skip_on_exit_code`` as a set of exit codes (None: none)."""
    codes = [] if value is None else [value] if isinstance(value, int) else list(value)
    if not all(isinstance(c, int) and not isinstance(c, bool) and 0 <= c <= 255 for c in codes):
        raise DagDefinitionError(
            f"skip_on_exit_code must be an exit code (0-255) or a list of them, not {value!r}",
            task_id=task_id,
        )
    return frozenset(codes)


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
    """Calls a Python function, passing the context names it declares and upstream outputs:
    in the worker's interpreter, or in another one when ``environment`` says so (a virtual
    environment, an external interpreter; ``dagrun.authoring.python_environments``)."""

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
        multiple_outputs: bool = False,
        environment: PythonEnvironment | None = None,
        templates_dict: dict[str, Any] | None = None,
        ignore_downstream_trigger_rules: bool = True,
        **options: Any,
    ):
        self.python_callable = python_callable
        #: Where the function runs when not in the worker's interpreter; None: there.
        self.environment = environment
        #: Templates rendered for each attempt and passed as ``templates_dict`` (Airflow's).
        self.templates_dict = templates_dict
        #: The function's source, sent to the other interpreter (None: runs here).
        self.function_source: FunctionSource | None = None
        self.args = tuple(args)
        self.kwargs = dict(kwargs or {})
        self.multiple_outputs = bool(multiple_outputs)
        self.choice = choice
        #: A short-circuit's reach: a falsy value skips everything downstream (True), or
        #: only its direct downstream tasks, the rest following their trigger rules.
        self.ignore_downstream_trigger_rules = ignore_downstream_trigger_rules
        self.mapped = dict(mapped or {})
        if templates_dict is not None and not isinstance(templates_dict, dict):
            raise DagDefinitionError(
                f"templates_dict must be a dict, not {templates_dict!r}", task_id=task_id
            )
        if environment is not None and not isinstance(environment, PythonEnvironment):
            raise DagDefinitionError(
                f"environment must be a PythonEnvironment, not {environment!r}", task_id=task_id
            )
        super().__init__(task_id, dag=dag, **options)
        if environment is not None:
            self.function_source = function_source(
                python_callable, dag_id=self.dag.dag_id, task_id=self.task_id
            )
        self._check_reach()
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

    def templated(self) -> dict[str, Any]:
        if self.templates_dict is None:
            return super().templated()
        return {**super().templated(), TEMPLATES_DICT: self.templates_dict}

    def declarable_names(self) -> tuple[str, ...]:
        """The context names its function may declare: all of them, or those whose values
        can be passed to another interpreter when it runs in one."""
        return PORTABLE_CONTEXT_NAMES if self.environment is not None else ALL_CONTEXT_NAMES

    def _check_reach(self) -> None:
        reach = self.ignore_downstream_trigger_rules
        if not isinstance(reach, bool):
            problem = f"ignore_downstream_trigger_rules must be True or False, not {reach!r}"
        elif not reach and self.choice != "short_circuit":
            problem = "ignore_downstream_trigger_rules is an option of short-circuit tasks"
        else:
            return
        raise DagDefinitionError(problem, dag_id=self.dag.dag_id, task_id=self.task_id)

    def _check_signature(self) -> None:
        """Every parameter not bound by the call must be a context name (one that can cross
        to another interpreter, for a task that runs in one), ``templates_dict``, or have a
        default."""
        signature = _signature(self.python_callable)
        try:
            bound = signature.bind_partial(*self.args, **self.kwargs, **named(self.mapped))
        except TypeError as exc:
            raise DagDefinitionError(
                f"bad arguments: {exc}", dag_id=self.dag.dag_id, task_id=self.task_id
            ) from None
        if KWARGS in self.mapped:
            return  # each instance's arguments are a dict known when it runs
        for name, param in signature.parameters.items():
            if name in bound.arguments or param.kind in (param.VAR_KEYWORD, param.VAR_POSITIONAL):
                continue
            known = self.declarable_names()
            if name in known or name == TEMPLATES_DICT or param.default is not param.empty:
                continue
            if self.environment is not None and name in ALL_CONTEXT_NAMES:
                raise DagDefinitionError(
                    f"asks for {name!r}, an object of the worker's process that cannot be "
                    f"passed to another interpreter (these can: {', '.join(sorted(known))})",
                    dag_id=self.dag.dag_id,
                    task_id=self.task_id,
                )
            shown = ", ".join(sorted(known if self.environment else CONTEXT_NAMES))
            more = "" if self.environment else ", or one of Airflow's"
            raise DagDefinitionError(
                f"asks for {name!r}, which is neither an argument nor a context name "
                f"({shown}{more})",
                dag_id=self.dag.dag_id,
                task_id=self.task_id,
            )

    @property
    def data_inputs(self) -> list[str]:
        return _output_ids((*self.args, *self.kwargs.values(), *self.mapped.values()))


#: The mapped argument of ``expand_kwargs``: each element is a dict of keyword arguments.
KWARGS = "**kwargs"


def named(mapped: Mapping[str, Any]) -> dict[str, Any]:
    """The mapped arguments that are named parameters (not ``expand_kwargs``' dicts)."""
    return {k: v for k, v in mapped.items() if k != KWARGS}


class TaskOutput(DependencyMixin):
    """The future return value of a task: pass it to another task call to depend on it.
    ``output["key"]`` is one key of it (a task with ``multiple_outputs``) or what the task
    pushed under that key; ``as_setup``, ``as_teardown`` and ``with`` act on its task and
    return the output."""

    def __init__(self, task: Task, key: str | None = None):
        self.task = task
        self.key = key

    def __repr__(self) -> str:
        return f"<output of {self.task.task_id}{'' if self.key is None else f'[{self.key!r}]'}>"

    def __getitem__(self, key: str) -> TaskOutput:
        return type(self)(self.task, key)

    def edge_tasks(self, upstream: bool) -> list[Task]:
        return [self.task]

    def as_setup(self) -> TaskOutput:
        self.task.as_setup()
        return self

    def as_teardown(
        self, *, setups: Any = None, on_failure_fail_dagrun: bool | None = None
    ) -> TaskOutput:
        self.task.as_teardown(setups=setups, on_failure_fail_dagrun=on_failure_fail_dagrun)
        return self

    def __enter__(self) -> setup_teardown.Scope:
        return self.task.__enter__()

    def __exit__(self, kind: object, *exc: object) -> None:
        self.task.__exit__(kind, *exc)


#: ``inspect.signature`` of a function seen before: a file's tasks often share one callable.
_known_signatures = functools.lru_cache(maxsize=512)(inspect.signature)


def _signature(func: Callable) -> inspect.Signature:
    """A callable's signature, worked out once per callable (not per task)."""
    try:
        return _known_signatures(func)
    except TypeError:  # an unhashable callable object: asked each time
        return inspect.signature(func)

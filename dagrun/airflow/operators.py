"""Airflow's operators: ``BaseOperator`` (a file's own subclasses with ``execute(context)``
and ``template_fields``), ``EmptyOperator``, ``PythonOperator``, ``BranchPythonOperator``,
``ShortCircuitOperator`` and ``get_current_context``. ``BashOperator`` is in
``dagrun.airflow.bash`` (it is dagrun's own ``BashTask``).

A ``BaseOperator`` is a dagrun task of its own kind: its attempt renders the operator's
``template_fields`` on a copy of it (the same operator serves every attempt a worker child
runs) and calls ``execute`` with Airflow's context, whose return value is the task's (its
XCom ``return_value``) unless ``do_xcom_push=False``. Construction follows Airflow's:
``default_args`` fill the arguments a call leaves out (``BaseOperatorMeta``), and what needs
the subclass's own attributes (template files, the outputs a field refers to, the template
check) runs once the subclass's ``__init__`` is done.
"""

from __future__ import annotations

import abc
import contextlib
import copy
import logging
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from dagrun.airflow import arguments as args_
from dagrun.airflow import templating
from dagrun.airflow.exceptions import AirflowException
from dagrun.airflow.models import Context
from dagrun.authoring.context_names import ALL_CONTEXT_NAMES
from dagrun.authoring.dag import DAG, current_dag
from dagrun.authoring.groups import TaskGroup
from dagrun.authoring.tasks import KWARGS, Task, TaskOutput
from dagrun.errors import DagDefinitionError
from dagrun.runtime import current

#: What an operator's attributes are before a call gives them (Airflow's defaults).
ATTRIBUTE_DEFAULTS: dict[str, Any] = {
    "owner": "airflow",
    "email": None,
    "email_on_failure": True,
    "email_on_retry": True,
    "do_xcom_push": True,
    "multiple_outputs": False,
    "inlets": [],
    "doc_md": None,
    "start_date": None,
    "end_date": None,
}


class MappedArgument:
    """Stands for a mapped argument while the operator is made: each instance gets its
    own element when its attempt runs."""

    def __repr__(self) -> str:
        return "<mapped>"


MAPPED = MappedArgument()


class BaseOperatorMeta(abc.ABCMeta):
    """Airflow's construction: ``default_args`` (the DAG's, then the call's) fill every
    argument the call leaves out, and the operator is finished once its subclass's
    ``__init__`` has set its attributes."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        dag = kwargs.get("dag") or current_dag()
        defaults = default_args_for(dag, kwargs.pop("default_args", None))
        made = super().__call__(*args, **args_.with_defaults(cls, kwargs, defaults))
        made.finish()
        return made


def default_args_for(dag: DAG | None, given: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``default_args`` a task made now gets: its DAG's, those of the task groups open
    around it (outermost first), then the call's own."""
    found = dict(getattr(dag, "airflow_default_args", {}))
    for group in getattr(dag, "open_groups", []):
        found.update(getattr(group, "airflow_default_args", {}))
    found.update(given or {})
    return found


class AirflowTask:
    """What every task ``dagrun.airflow`` makes shares: every context name through
    ``**kwargs``, Airflow's names for its neighbours, ``output``, ``set_upstream``."""

    context_names: tuple[str, ...] = ALL_CONTEXT_NAMES
    kind: str
    dag: DAG
    task_id: str

    @property
    def output(self) -> TaskOutput:
        """The task's return value, to pass to another task (Airflow's ``XComArg``)."""
        from dagrun.airflow.xcom import XComArg

        return XComArg(self)  # type: ignore[arg-type]  # a mixin of a Task

    @property
    def params(self) -> dict[str, Any]:
        """Airflow's ``task.params``: the DAG's params (their defaults) under the task's
        own; ``{}`` when neither has any."""
        declared = getattr(self.dag, "params", {}) or {}
        defaults = {k: v["default"] for k, v in declared.items() if "default" in v}
        return {**defaults, **(self.options.get("params") or {})}  # type: ignore[attr-defined]

    @params.setter
    def params(self, value: dict[str, Any]) -> None:
        self.options["params"] = value  # type: ignore[attr-defined]

    @property
    def dag_id(self) -> str:
        return self.dag.dag_id

    @property
    def upstream_task_ids(self) -> set[str]:
        return set(self.upstream_ids)  # type: ignore[attr-defined]

    @property
    def downstream_task_ids(self) -> set[str]:
        return {t.task_id for t in self.dag.tasks.values() if self.task_id in t.upstream_ids}

    @property
    def upstream_list(self) -> list[Task]:
        return [self.dag.tasks[t] for t in self.upstream_task_ids]

    @property
    def downstream_list(self) -> list[Task]:
        return [self.dag.tasks[t] for t in sorted(self.downstream_task_ids)]

    def set_upstream(self, other: Any) -> None:
        self << other

    def set_downstream(self, other: Any) -> None:
        self >> other

    @property
    def log(self) -> logging.Logger:
        return logging.getLogger("airflow.task")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Each class's ``kind`` (what ``dags show`` names its tasks) is its name, as
        Airflow's UI names an operator, unless the class sets its own."""
        super().__init_subclass__(**kwargs)
        if "kind" not in cls.__dict__:
            cls.kind = cls.__name__

    def keep(self, attributes: Mapping[str, Any]) -> None:
        """Set the arguments dagrun keeps as attributes (``owner``, ``doc_md`` ...)."""
        for name, value in attributes.items():
            setattr(self, name, value)

    def template_names(self) -> Collection[str]:
        """The names a template of this task may use: the context's and the DAG's
        ``user_defined_macros``."""
        return (*ALL_CONTEXT_NAMES, *getattr(self.dag, "user_defined_macros", {}))

    def template_environment(self) -> Any:
        """The DAG's environment: its filters are known (``user_defined_filters``)."""
        return templating.environment(self.dag)

    def template_globals(self) -> dict[str, Any]:
        return dict(getattr(self.dag, "user_defined_macros", {}))


class Prepared(NamedTuple):
    """A task's DAG and id, and its Airflow arguments as native options and as the
    attributes to set on it."""

    dag: DAG
    task_id: str
    natives: dict[str, Any]
    attributes: dict[str, Any]


def airflow_options(
    kind: str, task_id: str | None, dag: DAG | None, arguments: Mapping[str, Any]
) -> Prepared:
    """What making a task of ``kind`` from Airflow's arguments needs (its DAG: the given
    one or the current one); an id and a DAG it must have."""
    dag = dag or current_dag()
    if dag is None:
        raise DagDefinitionError(
            f"{kind} created outside a DAG: use `with DAG(...):` or pass dag=", task_id=task_id
        )
    if not task_id:
        raise DagDefinitionError(f"{kind} needs a task_id", dag_id=dag.dag_id)
    natives, kept = args_.split(arguments, dag, task_id)
    ignored = {k: v for k, v in arguments.items() if k in args_.IGNORED}
    return Prepared(dag, task_id, natives, {**ATTRIBUTE_DEFAULTS, **kept, **ignored})


@contextlib.contextmanager
def in_group(dag: DAG, group: TaskGroup | None) -> Iterator[None]:
    """Make a task inside ``group`` (Airflow's ``task_group=`` argument) as a ``with``
    block would."""
    if group is None or (dag.open_groups and dag.open_groups[-1] is group):
        yield
        return
    dag.open_groups.append(group)
    try:
        yield
    finally:
        dag.open_groups.pop()


class BaseOperator(AirflowTask, Task, metaclass=BaseOperatorMeta):
    """Airflow's base of operators: subclass it, set ``template_fields``, write
    ``execute(self, context)``."""

    template_fields: Sequence[str] = ()
    template_ext: Sequence[str] = ()
    template_fields_renderers: dict[str, str] = {}
    ui_color = "#fff"
    ui_fgcolor = "#000"
    shallow_copy_attrs: Sequence[str] = ()
    #: The arguments its ``__init__`` reads out of its ``**kwargs`` itself, besides its
    #: named parameters (``dags check-airflow`` accepts them).
    kwargs_read: tuple[str, ...] = ()

    def __init__(
        self,
        task_id: str | None = None,
        *,
        dag: DAG | None = None,
        task_group: TaskGroup | None = None,
        **arguments: Any,
    ):
        made = airflow_options(type(self).__name__, task_id, dag, arguments)
        self._finished = False
        with in_group(made.dag, task_group):
            super().__init__(made.task_id, dag=made.dag, **made.natives)
        self.keep(made.attributes)

    @property
    def task_type(self) -> str:
        return type(self).__name__

    def finish(self) -> None:
        """Once the subclass's ``__init__`` is done: read template files into their fields
        (Airflow's ``resolve_template_files``), depend on the outputs the fields refer to,
        and check the templates."""
        for field in self.template_fields:
            value = getattr(self, field, None)
            if isinstance(value, str) and value.endswith(tuple(self.template_ext)):
                setattr(self, field, templating.read_template_file(value, self.dag))
            for output in templating.outputs_in(value):
                self.add_upstream(output.task)
        self._finished = True
        self._check_templates()

    def templated(self) -> dict[str, Any]:
        fields = {f: getattr(self, f, None) for f in self.template_fields}
        return {**super().templated(), **fields}

    def _check_templates(self) -> None:
        if self._finished:  # the fields are set once the subclass's __init__ is done
            super()._check_templates()

    # ---------------------------------------------------------- Airflow's API

    def execute(self, context: Context) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define execute(self, context)")

    def pre_execute(self, context: Context) -> None:
        """Called before ``execute``; nothing by default."""

    def post_execute(self, context: Context, result: Any = None) -> None:
        """Called after ``execute`` with its result; nothing by default."""

    def render_template_fields(self, context: Mapping[str, Any], jinja_env: Any = None) -> None:
        for field in self.template_fields:
            setattr(self, field, self.render_template(getattr(self, field, None), context))

    def render_template(self, content: Any, context: Mapping[str, Any], *_: Any) -> Any:
        return templating.render(content, context, self.dag)

    def get_template_env(self) -> Any:
        return templating.environment(self.dag)

    def xcom_push(self, context: Mapping[str, Any], key: str, value: Any) -> None:
        context["ti"].xcom_push(key=key, value=value)

    def xcom_pull(self, context: Mapping[str, Any], task_ids: Any = None, **kwargs: Any) -> Any:
        return context["ti"].xcom_pull(task_ids=task_ids, **kwargs)

    @classmethod
    def partial(cls, **kwargs: Any) -> OperatorPartial:
        """The arguments every mapped instance shares; ``expand`` (or ``expand_kwargs``)
        maps the rest, one task instance per element."""
        return OperatorPartial(cls, kwargs)

    # ---------------------------------------------------------- one attempt

    def run_attempt(self, context: Any, inputs: dict[str, Any], elements: dict[str, Any]) -> Any:
        """Render the fields on a copy given this instance's mapped elements, then
        ``pre_execute``, ``execute``, ``post_execute`` with Airflow's context."""
        operator = self.copy_for_attempt(elements)
        airflow = Context(context.all_names())
        airflow["task"] = operator
        operator.render_template_fields(airflow)
        return operator.execute_with(airflow)

    def copy_for_attempt(self, elements: Mapping[str, Any]) -> BaseOperator:
        """A shallow copy to render into, with the instance's elements as attributes."""
        operator = copy.copy(self)
        given = dict(elements)
        for name, value in {**(given.pop(KWARGS, None) or {}), **given}.items():
            setattr(operator, name, value)
        return operator

    def execute_with(self, context: Context) -> Any:
        self.pre_execute(context)
        result = self.execute(context)
        self.post_execute(context, result)
        return result if self.do_xcom_push else None  # type: ignore[attr-defined]


class OperatorPartial:
    """``Operator.partial(task_id=..., ...)``: an operator waiting for ``expand``."""

    def __init__(self, operator: type[BaseOperator], kwargs: dict[str, Any]):
        self.operator = operator
        self.kwargs = kwargs

    def expand(self, **mapped: Any) -> BaseOperator:
        return self._make(mapped, {name: MAPPED for name in mapped})

    def expand_kwargs(self, values: Any) -> BaseOperator:
        return self._make({KWARGS: values}, {})

    def _make(self, mapped: dict[str, Any], placeholders: dict[str, Any]) -> BaseOperator:
        clash = sorted(set(mapped) & set(self.kwargs))
        if clash:
            raise DagDefinitionError(
                f"argument {clash[0]!r} given to both partial and expand",
                task_id=self.kwargs.get("task_id"),
            )
        made = self.operator(**self.kwargs, **placeholders)
        made.mapped = dict(mapped)
        made._check_mapped()
        return made


class EmptyOperator(BaseOperator):
    """Does nothing: a join point, a placeholder (Airflow's ``EmptyOperator``)."""

    ui_color = "#e8f7e4"

    def execute(self, context: Context) -> None:
        return None


class DummyOperator(EmptyOperator):
    """Airflow 2's old name of ``EmptyOperator``."""


class PythonOperator(BaseOperator):
    """Calls ``python_callable(*op_args, **op_kwargs)``, with the context names its
    signature asks for (every one when it takes ``**kwargs``) and ``templates_dict``
    rendered; its return value is the task's."""

    template_fields: Sequence[str] = ("templates_dict", "op_args", "op_kwargs")
    template_fields_renderers = {"templates_dict": "json", "op_args": "py", "op_kwargs": "py"}
    ui_color = "#ffefeb"

    def __init__(
        self,
        *,
        python_callable: Callable[..., Any],
        op_args: Sequence[Any] | None = None,
        op_kwargs: Mapping[str, Any] | None = None,
        templates_dict: Mapping[str, Any] | None = None,
        templates_exts: Sequence[str] | None = None,
        **kwargs: Any,
    ):
        if not callable(python_callable) and python_callable is not MAPPED:
            raise DagDefinitionError(
                "python_callable must be callable", task_id=kwargs.get("task_id")
            )
        super().__init__(**kwargs)
        self.python_callable = python_callable
        self.op_args = op_args or []
        self.op_kwargs = op_kwargs or {}
        self.templates_dict = templates_dict
        if templates_exts:
            self.template_ext = tuple(templates_exts)

    def execute(self, context: Context) -> Any:
        context["templates_dict"] = self.templates_dict
        return self.execute_callable(context)

    def execute_callable(self, context: Mapping[str, Any]) -> Any:
        kwargs = determine_kwargs(self.python_callable, self.op_args, context, self.op_kwargs)
        return self.python_callable(*self.op_args, **kwargs)


def determine_kwargs(
    function: Callable[..., Any],
    op_args: Sequence[Any],
    context: Mapping[str, Any],
    op_kwargs: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The keyword arguments a callable receives: the context values (every one when it
    takes ``**kwargs``, else those its parameters not filled by ``op_args`` are named
    after: Airflow's rule), then ``op_kwargs`` over them."""
    import inspect

    signature = inspect.signature(function)
    parameters = list(signature.parameters.values())
    if any(p.kind == p.VAR_KEYWORD for p in parameters):
        found = dict(context)
    else:
        named = [p.name for p in parameters[len(op_args) :]]
        found = {name: context[name] for name in named if name in context}
    return {**found, **(op_kwargs or {})}


class BranchPythonOperator(PythonOperator):
    """Its callable returns the task id (or ids, or a task group's id) of the direct
    downstream tasks to run; the others are skipped."""

    choice = "branch"

    def execute(self, context: Context) -> Any:
        return branch_ids(super().execute(context), self)


def branch_ids(chosen: Any, task: Task) -> Any:
    """What a branch chose, a task group's id standing for the group's first tasks below
    the branch (Airflow's rule)."""
    picked = [chosen] if isinstance(chosen, str) else chosen
    if not isinstance(picked, list | tuple | set):
        return chosen
    found: list[str] = []
    for task_id in picked:
        group = task.dag.groups.get(task_id) if isinstance(task_id, str) else None
        if group is None:
            found.append(task_id)
            continue
        found += [t.task_id for t in group.edge_tasks(upstream=False)]
    return found


class ShortCircuitOperator(PythonOperator):
    """A falsy value of its callable skips the tasks downstream of it: all of them,
    whatever their trigger rules, or (``ignore_downstream_trigger_rules=False``) only its
    direct downstream tasks, the rest following their own rules."""

    choice = "short_circuit"

    def __init__(self, *, ignore_downstream_trigger_rules: bool = True, **kwargs: Any):
        super().__init__(**kwargs)
        self.ignore_downstream_trigger_rules = bool(ignore_downstream_trigger_rules)


def is_venv_installed() -> bool:
    """Whether virtual environments can be made: always, with the standard ``venv``
    module (or ``uv``) that dagrun makes them with."""
    return True


def get_current_context() -> Context:
    """The running task's context (Airflow's ``get_current_context``)."""
    found = current.current()
    if found is None:
        raise AirflowException(
            "Current context was requested but no context was found! Are you running within "
            "an Airflow task?"
        )
    return Context(found.all_names())

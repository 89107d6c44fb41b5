"""What each Airflow name dagrun provides accepts as arguments, for ``dags check-airflow``
(``dagrun.airflow.checks``), which reads DAG files without running them.

Read from the objects themselves, so that what the check says follows what a parse does:
a DAG's arguments are its ``__init__``'s and the ones it accepts and ignores
(``dagrun.airflow.dag.IGNORED``); an operator's or sensor's are the parameters of the
``__init__`` methods of its classes in ``dagrun.airflow`` (down to the first that takes no
``**kwargs``, or to dagrun's native task class), every ``BaseOperator`` argument
(``arguments.BASE_ARGUMENTS``, ``arguments.IGNORED`` among them, warned), and the few that
an operator reads out of its ``**kwargs`` itself (its class's ``kwargs_read``); ``@task`` and its
variants take the task arguments and their own (``DECORATOR_OPTIONS``); anything else its
signature, where it has no ``**kwargs``. A module of ``dagrun.airflow`` that is not there
checks nothing: its names accept any argument.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from dataclasses import dataclass
from typing import Any

from dagrun.airflow import arguments
from dagrun.airflow.decorators import BASH_OPTIONS
from dagrun.airflow.virtualenv import CALL_ARGUMENTS, VIRTUALENV_ARGUMENTS

_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
_MISSING: Any = object()


@dataclass(frozen=True)
class Accepts:
    """The keyword arguments a call may give: ``names`` (None: any), of which ``ignored``
    are accepted without being acted on; ``dag``: a DAG's (its schedule is checked too);
    ``task``: a task's (its ``email`` mails only with an SMTP server)."""

    names: frozenset[str] | None
    ignored: frozenset[str] = frozenset()
    dag: bool = False
    task: bool = False

    def refuses(self, name: str) -> bool:
        return self.names is not None and name not in self.names


ANY = Accepts(None)

#: ``@task``'s variants (``@task.bash`` ...) and the options each takes besides the task
#: arguments; a variant not listed takes any (``@task.sensor``: the sensors' options).
DECORATOR_OPTIONS: dict[str, tuple[str, ...]] = {
    "python": (),
    "branch": (),
    "short_circuit": (),
    "bash": BASH_OPTIONS,
    "virtualenv": VIRTUALENV_ARGUMENTS,
    "branch_virtualenv": VIRTUALENV_ARGUMENTS,
    "external_python": ("python", *CALL_ARGUMENTS),
    "branch_external_python": ("python", *CALL_ARGUMENTS),
}

#: The parameters of the class ``@task`` makes that a decorator's caller does not give.
_TASK_INTERNALS = frozenset({"python_callable", "args", "kwargs", "dag", "choice", "mapped"})
_TASK_INTERNALS |= {"sensor", "self"}


def lookup(home: str, attributes: tuple[str, ...] = ()) -> Any:
    """The object ``home`` (``module:attribute`` of ``dagrun.airflow``, as
    ``airflow_names.provided`` gives it), then each of ``attributes`` on it; ``_MISSING``
    when it has no such attribute, None when its module is not there."""
    module, name = home.split(":")
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):  # not there yet: nothing to check against
        return None
    for attribute in attributes:
        found = getattr(found, attribute, _MISSING)
        if found is _MISSING:
            return _MISSING
    return found


def has(home: str, attributes: tuple[str, ...]) -> bool:
    """Whether the provided object has these attributes (True when its module is absent)."""
    return lookup(home, attributes) is not _MISSING


@functools.cache
def accepts(home: str, attributes: tuple[str, ...] = ()) -> Accepts:
    """What a call of the provided object (``home``, then ``attributes``) accepts."""
    found = lookup(home, attributes)
    if found is None or found is _MISSING:
        return ANY
    from dagrun.airflow import dag, decorators, operators

    if found in (dag.dag, dag.sdk_dag) or (isinstance(found, type) and issubclass(found, dag.DAG)):
        return Accepts(_parameters(dag.DAG.__init__) | dag.IGNORED, dag.IGNORED, dag=True)
    if isinstance(found, type) and issubclass(found, operators.BaseOperator):
        return _operator(found)
    if found is decorators.task:
        return _decorator(attributes[-1] if attributes else "python")
    if attributes and lookup(home, attributes[:-1]) is decorators.task:
        return _decorator(attributes[-1])
    return _signature(found)


def _operator(cls: type) -> Accepts:
    """An operator's or sensor's arguments (see the module's docstring)."""
    names = set(arguments.BASE_ARGUMENTS) | {"task_id", "dag", "task_group", "default_args"}
    for klass in cls.__mro__:
        if not klass.__module__.startswith("dagrun.airflow."):
            break
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        names |= _parameters(init)
        if not _takes_kwargs(init):
            break
    names |= set(getattr(cls, "kwargs_read", ()))
    return Accepts(frozenset(names), arguments.IGNORED, task=True)


def _decorator(variant: str) -> Accepts:
    """``@task`` (``python``) or one of its variants."""
    if variant not in DECORATOR_OPTIONS:
        return ANY
    from dagrun.airflow.decorators import NATIVE_KEYWORDS, AirflowPythonTask

    own = (_parameters(AirflowPythonTask.__init__) | NATIVE_KEYWORDS) - _TASK_INTERNALS
    names = own | arguments.BASE_ARGUMENTS | {"task_id", *DECORATOR_OPTIONS[variant]}
    return Accepts(frozenset(names), arguments.IGNORED, task=True)


def _signature(found: Any) -> Accepts:
    """A plain function's or class's keyword arguments; any, with ``**kwargs``."""
    try:
        signature = inspect.signature(found)
    except (TypeError, ValueError):  # a builtin, or not callable: nothing to check
        return ANY
    if any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values()):
        return ANY
    return Accepts(frozenset(p.name for p in signature.parameters.values() if p.kind in _NAMED))


def _parameters(function: Any) -> frozenset[str]:
    parameters = inspect.signature(function).parameters.values()
    return frozenset(p.name for p in parameters if p.kind in _NAMED) - {"self"}


def _takes_kwargs(function: Any) -> bool:
    return any(p.kind is p.VAR_KEYWORD for p in inspect.signature(function).parameters.values())

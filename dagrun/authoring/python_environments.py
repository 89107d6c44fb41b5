"""Where a Python task's function runs when not in the worker's own interpreter: a virtual
environment made for a set of requirements (``@task.virtualenv``) or an interpreter already
installed (``@task.external_python``), and how it is called there; and the function's source,
which is what travels to that interpreter.

Checked while the DAG file is imported, so a bad option, or a function that cannot run
elsewhere (a lambda, a closure, one typed at an interactive prompt), is an import error of
the file, not a failure of every attempt. Making the environment and calling the function
are the runtime's (``dagrun.runtime.virtualenvs``); this module only describes them.

As in Airflow, the function travels as its source, not as an object: it may use no variable
of the DAG file nor of an enclosing function, imports what it needs inside its body, and
receives everything else as arguments. ``from __future__ import annotations`` is in force
where it runs, so annotations naming the DAG file's imports do no harm.
"""

from __future__ import annotations

import ast
import inspect
import os
import re
import textwrap
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dagrun.errors import DagDefinitionError

#: What may carry arguments in and the return value out: ``pickle``, or ``cloudpickle`` and
#: ``dill`` (Airflow's ``serializer=``) where they are installed on both sides.
SERIALIZERS = ("pickle", "cloudpickle", "dill")

_VERSION = re.compile(r"[0-9]+(\.[0-9]+)?")


@dataclass(frozen=True)
class PythonEnvironment:
    """Where a Python task's function runs, and how it is called there.

    Either ``python`` (an interpreter's path: ``@task.external_python``) or a virtual
    environment for ``requirements`` (``@task.virtualenv``), made once per distinct
    environment (``cache_key``) and kept under ``$DAGRUN_HOME/venvs`` (or
    ``venv_cache_path``). Build one with :func:`virtualenv_environment` or
    :func:`external_environment`, which check every value.
    """

    #: An existing interpreter to run in (an absolute path); None: a virtual environment.
    python: str | None = None
    #: pip requirement lines, as written (blank lines and comments left out).
    requirements: tuple[str, ...] = ()
    #: The interpreter to make the environment with, as ``python3.11`` on PATH; None: the
    #: worker's own.
    python_version: str | None = None
    system_site_packages: bool = False
    pip_install_options: tuple[str, ...] = ()
    #: The package indexes to install from, the first the main one; None: pip's own
    #: settings; empty: no index at all (Airflow's meaning).
    index_urls: tuple[str, ...] | None = None
    #: The folder the environments are kept in; None: ``$DAGRUN_HOME/venvs``.
    venv_cache_path: str | None = None
    serializer: str = "pickle"
    #: Lines given to the function as the global ``virtualenv_string_args`` (Airflow's).
    string_args: tuple[str, ...] = ()
    env_vars: Mapping[str, str] = field(default_factory=dict)
    #: Whether the function's process starts from the worker's environment variables.
    inherit_env: bool = True
    #: Exit codes of the function's process that end the task ``skipped``.
    skip_on_exit_code: tuple[int, ...] = ()

    def cache_key(self) -> dict[str, Any]:
        """What makes two virtual environments the same: what is installed and with what
        (the hash of this names the environment's folder). Requirements are sorted, so
        their order does not matter."""
        return {
            "python_version": self.python_version,
            "system_site_packages": self.system_site_packages,
            "requirements": sorted(self.requirements),
            "pip_install_options": list(self.pip_install_options),
            "index_urls": None if self.index_urls is None else list(self.index_urls),
        }


@dataclass(frozen=True)
class FunctionSource:
    """A function as it travels to another interpreter: its ``def`` (decorators removed,
    dedented), its name, and the line of its ``def`` in its file (so that tracebacks there
    give the lines of the DAG file)."""

    name: str
    text: str
    line: int


def virtualenv_environment(
    *,
    requirements: Iterable[str] | str | None = None,
    python_version: str | None = None,
    system_site_packages: bool = False,
    pip_install_options: Iterable[str] | None = None,
    index_urls: Iterable[str] | str | None = None,
    venv_cache_path: str | os.PathLike[str] | None = None,
    serializer: str = "pickle",
    string_args: Iterable[Any] | None = None,
    env_vars: Mapping[str, str] | None = None,
    inherit_env: bool = True,
    skip_on_exit_code: int | Iterable[int] | None = None,
    expect_airflow: bool = True,
    folder: str | None = None,
    task_id: str | None = None,
) -> PythonEnvironment:
    """A virtual environment for ``requirements``, checked. ``requirements`` is a list of
    pip requirement strings, or one string: a requirements file's lines, or the name of a
    ``.txt`` file (relative to ``folder``, the DAG file's) to read them from now.
    ``expect_airflow`` is accepted for Airflow's sake and ignored."""
    where = {"task_id": task_id}
    if serializer in ("cloudpickle", "dill") and not system_site_packages:
        # As Airflow does: the environment needs the serializer to read its arguments.
        extra = [serializer]
    else:
        extra = []
    lines = _requirements(requirements, folder, where)
    if python_version is not None and (
        not isinstance(python_version, str) or not _VERSION.fullmatch(python_version)
    ):
        raise DagDefinitionError(
            f"python_version must be a string such as '3.11', not {python_version!r}", **where
        )
    return PythonEnvironment(
        requirements=tuple(lines + [r for r in extra if r not in lines]),
        python_version=python_version,
        system_site_packages=_flag(system_site_packages, "system_site_packages", where),
        pip_install_options=_strings(pip_install_options, "pip_install_options", where),
        index_urls=None if index_urls is None else _strings(index_urls, "index_urls", where),
        venv_cache_path=None if venv_cache_path is None else os.fspath(venv_cache_path),
        **_call_options(
            serializer, string_args, env_vars, inherit_env, skip_on_exit_code, expect_airflow, where
        ),
    )


def external_environment(
    *,
    python: str | os.PathLike[str] | None = None,
    serializer: str = "pickle",
    string_args: Iterable[Any] | None = None,
    env_vars: Mapping[str, str] | None = None,
    inherit_env: bool = True,
    skip_on_exit_code: int | Iterable[int] | None = None,
    expect_airflow: bool = True,
    task_id: str | None = None,
) -> PythonEnvironment:
    """An interpreter already installed, by its path (checked to exist when the task runs:
    the DAG may be parsed on a host that does not have it)."""
    where = {"task_id": task_id}
    if not isinstance(python, str | os.PathLike) or not str(os.fspath(python)).strip():
        raise DagDefinitionError(
            f"python must be the path of a Python interpreter, not {python!r}", **where
        )
    return PythonEnvironment(
        python=os.fspath(python),
        **_call_options(
            serializer, string_args, env_vars, inherit_env, skip_on_exit_code, expect_airflow, where
        ),
    )


def _call_options(
    serializer: Any,
    string_args: Any,
    env_vars: Any,
    inherit_env: Any,
    skip_on_exit_code: Any,
    expect_airflow: Any,
    where: dict[str, str | None],
) -> dict[str, Any]:
    """The options of how the function is called, shared by both kinds, checked."""
    if serializer not in SERIALIZERS:
        raise DagDefinitionError(
            f"serializer must be one of {', '.join(map(repr, SERIALIZERS))}, not {serializer!r}",
            **where,
        )
    if env_vars is not None and (
        not isinstance(env_vars, Mapping)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in env_vars.items())
    ):
        raise DagDefinitionError(
            f"env_vars must be a dict of strings to strings, not {env_vars!r}", **where
        )
    if isinstance(string_args, str) or (
        string_args is not None and not isinstance(string_args, Iterable)
    ):
        raise DagDefinitionError(f"string_args must be a list, not {string_args!r}", **where)
    codes = [] if skip_on_exit_code is None else skip_on_exit_code
    codes = [codes] if isinstance(codes, int) and not isinstance(codes, bool) else codes
    if not isinstance(codes, Iterable) or not all(
        isinstance(c, int) and not isinstance(c, bool) for c in codes
    ):
        raise DagDefinitionError(
            f"skip_on_exit_code must be an exit code or a list of them, not {skip_on_exit_code!r}",
            **where,
        )
    _flag(expect_airflow, "expect_airflow", where)
    return {
        "serializer": serializer,
        "string_args": tuple(str(s) for s in string_args or ()),
        "env_vars": dict(env_vars or {}),
        "inherit_env": _flag(inherit_env, "inherit_env", where),
        "skip_on_exit_code": tuple(codes),
    }


def _requirements(value: Any, folder: str | None, where: dict[str, str | None]) -> list[str]:
    """Requirement lines from a list, a requirements file's text, or a ``.txt`` file's name;
    blank lines and comments left out."""
    if value is None:
        return []
    if isinstance(value, str):
        if "\n" not in value and value.strip().endswith(".txt"):
            path = os.path.join(folder or "", value.strip())
            try:
                with open(path, encoding="utf-8") as file:
                    value = file.read()
            except OSError as exc:
                raise DagDefinitionError(
                    f"requirements file {path!r} cannot be read: {exc.strerror or exc}", **where
                ) from None
        value = value.splitlines()
    found = _strings(value, "requirements", where)
    return [r.strip() for r in found if r.strip() and not r.strip().startswith("#")]


def _strings(value: Any, name: str, where: dict[str, str | None]) -> tuple[str, ...]:
    """A list of strings (one string counts as a list of one)."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, Iterable) or isinstance(value, Mapping):
        raise DagDefinitionError(f"{name} must be a list of strings, not {value!r}", **where)
    items = tuple(value)
    bad = [item for item in items if not isinstance(item, str)]
    if bad:
        raise DagDefinitionError(f"{name} must hold strings only, not {bad[0]!r}", **where)
    return items


def _flag(value: Any, name: str, where: dict[str, str | None]) -> bool:
    if not isinstance(value, bool):
        raise DagDefinitionError(f"{name} must be True or False, not {value!r}", **where)
    return value


def function_source(
    function: Callable[..., Any], *, dag_id: str | None = None, task_id: str | None = None
) -> FunctionSource:
    """The source of a function that is to run in another interpreter, or an error saying
    why it cannot (a lambda, a closure, a generator, source that cannot be read)."""

    def refuse(reason: str) -> DagDefinitionError:
        return DagDefinitionError(
            f"its function cannot run in another interpreter: {reason}",
            dag_id=dag_id,
            task_id=task_id,
        )

    if not isinstance(function, types.FunctionType):
        raise refuse(f"it must be a function defined with def, not {type(function).__name__}")
    if function.__name__ == "<lambda>":
        raise refuse("a lambda has no source of its own; define the function with def")
    if inspect.isgeneratorfunction(function) or inspect.iscoroutinefunction(function):
        raise refuse("it must be a plain function (not a generator, not async)")
    if function.__code__.co_freevars:
        names = ", ".join(function.__code__.co_freevars)
        raise refuse(f"it uses {names} of the function around it; pass them as arguments")
    try:
        raw = inspect.getsource(function)
    except (OSError, TypeError) as exc:
        raise refuse(f"its source cannot be read ({exc}); define it in a file") from None
    text = textwrap.dedent(raw)
    try:
        node = ast.parse(text).body[0]
    except (SyntaxError, IndexError):
        raise refuse("its source does not parse on its own once dedented") from None
    if not isinstance(node, ast.FunctionDef):
        raise refuse("its source is not a def statement")
    body = "".join(text.splitlines(keepends=True)[node.lineno - 1 :])
    first = inspect.unwrap(function).__code__.co_firstlineno
    return FunctionSource(node.name, body, first + node.lineno - 1)

"""Airflow's functions in another Python: ``PythonVirtualenvOperator`` and
``@task.virtualenv`` (an environment made once per requirements set and cached),
``ExternalPythonOperator`` and ``@task.external_python`` (an interpreter already installed),
over dagrun's own (``dagrun.authoring.python_environments``, ``dagrun.runtime.virtualenvs``).

As in Airflow, the function is sent as its source (no closures, no globals of the DAG file),
its arguments and return value are serialised (pickle, or cloudpickle/dill), and it gets
the context names that are plain data; ``system_site_packages`` is on by default, Airflow's
default (dagrun's native default is off).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from dagrun.airflow.models import Context
from dagrun.airflow.operators import PythonOperator, branch_ids, determine_kwargs
from dagrun.authoring.context_names import PORTABLE_CONTEXT_NAMES, TEMPLATES_DICT
from dagrun.authoring.python_environments import (
    PythonEnvironment,
    external_environment,
    function_source,
    virtualenv_environment,
)
from dagrun.runtime import virtualenvs

#: Airflow's arguments of a call in another Python, read out of the operator's ``**kwargs``
#: (each a native option but the last two: ``use_dill`` is ``serializer="dill"``, and
#: ``expect_airflow`` concerns what dagrun does not install).
CALL_ARGUMENTS = (
    "serializer",
    "string_args",
    "env_vars",
    "inherit_env",
    "skip_on_exit_code",
    "use_dill",
    "expect_airflow",
)
#: And those of a virtual environment besides.
VIRTUALENV_ARGUMENTS = (
    "requirements",
    "python_version",
    "system_site_packages",
    "pip_install_options",
    "index_urls",
    "venv_cache_path",
    *CALL_ARGUMENTS,
)


class _ElsewhereOperator(PythonOperator):
    """A PythonOperator whose callable runs in ``self.environment``."""

    environment: PythonEnvironment

    def prepare(self, make: Callable[..., PythonEnvironment], options: Mapping[str, Any]) -> None:
        self.environment = make(**options, task_id=self.task_id)
        self.function_source = function_source(
            self.python_callable, dag_id=self.dag.dag_id, task_id=self.task_id
        )

    def execute_callable(self, context: Mapping[str, Any]) -> Any:
        names = {k: context[k] for k in (*PORTABLE_CONTEXT_NAMES, TEMPLATES_DICT) if k in context}
        kwargs = determine_kwargs(self.python_callable, self.op_args, names, self.op_kwargs)
        folder = os.path.dirname(self.dag.fileloc) if self.dag.fileloc else None
        return virtualenvs.call_function(
            self.function_source, self.environment, self.op_args, kwargs, folder=folder
        )


def _split(kwargs: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    return {k: kwargs.pop(k) for k in names if k in kwargs}


def serializer(options: dict[str, Any]) -> dict[str, Any]:
    """Airflow's ``use_dill=True`` is ``serializer="dill"``; its default is pickle."""
    if options.pop("use_dill", False):
        options["serializer"] = "dill"
    if options.get("serializer") is None:
        options.pop("serializer", None)
    options.pop("expect_airflow", None)
    return options


class PythonVirtualenvOperator(_ElsewhereOperator):
    """Calls ``python_callable`` in a virtual environment with ``requirements``."""

    template_fields = (*PythonOperator.template_fields, "requirements")
    kwargs_read = VIRTUALENV_ARGUMENTS

    def __init__(self, *, python_callable: Callable[..., Any], **kwargs: Any):
        own = serializer(_split(kwargs, VIRTUALENV_ARGUMENTS))
        own.setdefault("system_site_packages", True)
        super().__init__(python_callable=python_callable, **kwargs)
        self.requirements = own.get("requirements")
        folder = os.path.dirname(self.dag.fileloc) if self.dag.fileloc else None
        self.prepare(virtualenv_environment, {**own, "folder": folder})


class ExternalPythonOperator(_ElsewhereOperator):
    """Calls ``python_callable`` with the interpreter ``python``."""

    kwargs_read = CALL_ARGUMENTS

    def __init__(self, *, python: str, python_callable: Callable[..., Any], **kwargs: Any):
        own = serializer(_split(kwargs, CALL_ARGUMENTS))
        super().__init__(python_callable=python_callable, **kwargs)
        self.prepare(external_environment, {**own, "python": python})


class BranchPythonVirtualenvOperator(PythonVirtualenvOperator):
    """A branch whose callable runs in a virtual environment."""

    choice = "branch"

    def execute(self, context: Context) -> Any:
        return branch_ids(super().execute(context), self)


class BranchExternalPythonOperator(ExternalPythonOperator):
    """A branch whose callable runs with the interpreter ``python``."""

    choice = "branch"

    def execute(self, context: Context) -> Any:
        return branch_ids(super().execute(context), self)

"""dagrun: a small, correct, fast Airflow-style orchestrator for data pipelines.

The authoring API is all a DAG file needs::

    from dagrun import DAG, task, BashTask, Param, NonRetryableError, notify

Its names are imported on first use (PEP 562): a command such as ``dagrun dags list`` or a
worker's parent never builds a DAG, so it does not pay for the authoring modules, while a DAG
file's ``from dagrun import DAG`` works as if they were imported here.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dagrun import notify
    from dagrun.assets import Asset
    from dagrun.connections import Connection
    from dagrun.dag import DAG, BashTask, PythonTask, task
    from dagrun.errors import NonRetryableError
    from dagrun.groups import TaskGroup, task_group
    from dagrun.params import Param
    from dagrun.partitions import partition
    from dagrun.variables import Variable

#: Each public name and the module that defines it.
_HOMES = {
    "DAG": "dagrun.dag",
    "Asset": "dagrun.assets",
    "BashTask": "dagrun.dag",
    "Connection": "dagrun.connections",
    "NonRetryableError": "dagrun.errors",
    "Param": "dagrun.params",
    "PythonTask": "dagrun.dag",
    "TaskGroup": "dagrun.groups",
    "Variable": "dagrun.variables",
    "notify": "dagrun.notify",
    "partition": "dagrun.partitions",
    "task": "dagrun.dag",
    "task_group": "dagrun.groups",
}

__all__ = [
    "DAG",
    "Asset",
    "BashTask",
    "Connection",
    "NonRetryableError",
    "Param",
    "PythonTask",
    "TaskGroup",
    "Variable",
    "notify",
    "partition",
    "task",
    "task_group",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'dagrun' has no attribute {name!r}")
    module = import_module(home)
    value = module if home == f"dagrun.{name}" else getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])

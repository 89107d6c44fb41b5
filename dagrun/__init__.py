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
    from dagrun.authoring.assets import Asset, AssetAll, AssetAny, AssetOrTimeSchedule
    from dagrun.authoring.dag import DAG
    from dagrun.authoring.groups import TaskGroup, task_group
    from dagrun.authoring.params import Param
    from dagrun.authoring.taskflow import setup, task, teardown
    from dagrun.authoring.tasks import BashTask, PythonTask
    from dagrun.errors import NonRetryableError, SkipTask
    from dagrun.runtime import notify
    from dagrun.runtime.connections import Connection
    from dagrun.runtime.partitions import partition
    from dagrun.runtime.variables import Variable
    from dagrun.states import TriggerRule
    from dagrun.timing.schedules import CronIntervals, CronTrigger, DeltaIntervals

#: Each public name and the module that defines it.
_HOMES = {
    "DAG": "dagrun.authoring.dag",
    "Asset": "dagrun.authoring.assets",
    "AssetAll": "dagrun.authoring.assets",
    "AssetAny": "dagrun.authoring.assets",
    "AssetOrTimeSchedule": "dagrun.authoring.assets",
    "BashTask": "dagrun.authoring.tasks",
    "Connection": "dagrun.runtime.connections",
    "CronIntervals": "dagrun.timing.schedules",
    "CronTrigger": "dagrun.timing.schedules",
    "DeltaIntervals": "dagrun.timing.schedules",
    "NonRetryableError": "dagrun.errors",
    "Param": "dagrun.authoring.params",
    "PythonTask": "dagrun.authoring.tasks",
    "SkipTask": "dagrun.errors",
    "TaskGroup": "dagrun.authoring.groups",
    "TriggerRule": "dagrun.states",
    "Variable": "dagrun.runtime.variables",
    "notify": "dagrun.runtime.notify",
    "partition": "dagrun.runtime.partitions",
    "setup": "dagrun.authoring.taskflow",
    "task": "dagrun.authoring.taskflow",
    "task_group": "dagrun.authoring.groups",
    "teardown": "dagrun.authoring.taskflow",
}

__all__ = [
    "DAG",
    "Asset",
    "AssetAll",
    "AssetAny",
    "AssetOrTimeSchedule",
    "BashTask",
    "Connection",
    "CronIntervals",
    "CronTrigger",
    "DeltaIntervals",
    "NonRetryableError",
    "Param",
    "PythonTask",
    "SkipTask",
    "TaskGroup",
    "TriggerRule",
    "Variable",
    "notify",
    "partition",
    "setup",
    "task",
    "task_group",
    "teardown",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'dagrun' has no attribute {name!r}")
    module = import_module(home)
    value = module if home.endswith(f".{name}") else getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])

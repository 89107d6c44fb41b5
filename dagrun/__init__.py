"""dagrun: a small, correct, fast Airflow-style orchestrator for data pipelines.

The authoring API is all a DAG file needs::

    from dagrun import DAG, task, BashTask, Param, NonRetryableError, notify
"""

from dagrun import notify
from dagrun.assets import Asset
from dagrun.connections import Connection
from dagrun.dag import DAG, BashTask, PythonTask, task
from dagrun.errors import NonRetryableError
from dagrun.groups import TaskGroup, task_group
from dagrun.params import Param
from dagrun.partitions import partition
from dagrun.variables import Variable

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

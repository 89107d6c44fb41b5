"""dagrun: a small, correct, fast Airflow-style orchestrator for data pipelines.

The authoring API is all a DAG file needs::

    from dagrun import DAG, task, BashTask, Param, NonRetryableError, notify
"""

from dagrun import notify
from dagrun.dag import DAG, BashTask, PythonTask, task
from dagrun.errors import NonRetryableError
from dagrun.groups import TaskGroup, task_group
from dagrun.params import Param
from dagrun.partitions import partition

__all__ = [
    "DAG",
    "BashTask",
    "NonRetryableError",
    "Param",
    "PythonTask",
    "TaskGroup",
    "notify",
    "partition",
    "task",
    "task_group",
]
__version__ = "0.1.0"

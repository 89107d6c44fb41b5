"""XComs as Airflow files name them: ``XComArg`` (a task's output, ``op.output``,
``XComArg(op, key=...)``), and the ``TaskInstance`` and ``DagRun`` of the context
(``dagrun.runtime.task_instance``), for type hints and ``isinstance``."""

from __future__ import annotations

from typing import Any

from dagrun.authoring.tasks import Task, TaskOutput
from dagrun.runtime.task_instance import RETURN_KEY, DagRun, TaskInstance

XCOM_RETURN_KEY = RETURN_KEY

__all__ = ["XCOM_RETURN_KEY", "DagRun", "TaskInstance", "XComArg"]


class XComArg(TaskOutput):
    """A task's output under a key (its return value by default): passed to another task
    it makes that task depend on this one and receive the value."""

    def __init__(self, operator: Task, key: str | None = XCOM_RETURN_KEY):
        super().__init__(operator, None if key in (None, XCOM_RETURN_KEY) else key)

    @property
    def operator(self) -> Task:
        return self.task

    def __getitem__(self, key: str) -> XComArg:
        return XComArg(self.task, key)

    def __iter__(self) -> Any:
        raise TypeError("an XComArg is not iterable when the DAG is parsed; map over it")

    def __str__(self) -> str:
        """A template that pulls the value when a field holding it renders (Airflow's: an
        XComArg in an f-string becomes its value at run time)."""
        key = self.key or XCOM_RETURN_KEY
        return (
            f"{{{{ task_instance.xcom_pull(task_ids='{self.task.task_id}', "
            f"dag_id='{self.task.dag.dag_id}', key='{key}') }}}}"
        )

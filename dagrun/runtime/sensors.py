"""Built-in sensors: tasks that wait for something outside their DAG run.

Each is a Python task poked until its condition holds, with the sensor options of
``@task.sensor`` (``poke_interval``, ``timeout``, ``mode``, ``soft_fail``) beside the usual
task options::

    from dagrun.runtime.sensors import ExternalTaskSensor, FileSensor, TimeDeltaSensor

    FileSensor("landed", filepath="/landing/{{ ds }}.csv", poke_interval=300)
    ExternalTaskSensor("upstream_done", external_dag_id="ingest", external_task_id="load")
    TimeDeltaSensor("settle", delta="2h")

What a poke means, and how the store keeps a waiting sensor (``up_for_reschedule``, holding
no lease, no process and no pool slot), is in ``dagrun.runtime.task_calls.sense`` and
``dagrun.store.attempts.complete``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from dagrun.authoring.dag import check_id
from dagrun.authoring.options import split_sensor_options
from dagrun.authoring.tasks import PythonTask
from dagrun.errors import DagDefinitionError, NonRetryableError
from dagrun.runtime.context import TaskContext
from dagrun.states import FAILED_TASK_STATES, RunState
from dagrun.timing.instants import parse_duration

#: The states of an external run or task that it will never leave by itself.
_FAILED = {RunState.FAILED.value, *(s.value for s in FAILED_TASK_STATES)}


class _Sensor(PythonTask):
    """A Python task whose callable is the subclass's ``poke`` (taking context names, as any
    task callable does), with the sensor options split from the task options."""

    #: Each subclass's check, with the context names it takes as parameters.
    poke: Callable[..., Any]

    def __init__(self, task_id: str, **options: Any):
        sensor, rest = split_sensor_options(options)
        super().__init__(task_id, self.poke, sensor=sensor, **rest)


class FileSensor(_Sensor):
    """Waits until ``filepath`` exists: a template, rendered with the attempt's context
    (``/landing/{{ ds }}/_SUCCESS``), checked when the DAG file is parsed."""

    def __init__(self, task_id: str, filepath: str | os.PathLike, **options: Any):
        if not isinstance(filepath, str | os.PathLike) or not str(filepath):
            raise DagDefinitionError("FileSensor needs a filepath", task_id=task_id)
        self.filepath = str(filepath)
        super().__init__(task_id, **options)

    def templated(self) -> dict[str, Any]:
        return {**super().templated(), "filepath": self.filepath}

    def poke(self, ctx: TaskContext) -> bool:
        from dagrun.runtime.rendering import render  # in the worker's child, where it is loaded

        return os.path.exists(render(self.filepath, ctx.names()))


class ExternalTaskSensor(_Sensor):
    """Waits until the run of DAG ``external_dag_id`` with this run's logical date, or its
    task ``external_task_id``, is ``success``; fails for good (no retry) once it is
    ``failed`` or ``upstream_failed``. Reads the store the attempt's worker uses."""

    def __init__(
        self,
        task_id: str,
        external_dag_id: str,
        external_task_id: str | None = None,
        **options: Any,
    ):
        self.external_dag_id = check_id("external DAG", external_dag_id, task_id=task_id)
        self.external_task_id = (
            None
            if external_task_id is None
            else check_id("external task", external_task_id, task_id=task_id)
        )
        super().__init__(task_id, **options)

    def poke(self, ctx: TaskContext) -> bool:
        if ctx.db_url is None:
            raise NonRetryableError(
                "ExternalTaskSensor reads the store: run it with a worker (dagrun run, "
                "scheduler, worker), not dagrun test"
            )
        from dagrun.store import run_reads
        from dagrun.store.engine import shared_store

        with shared_store(ctx.db_url).read() as conn:
            state = run_reads.external_state(
                conn, self.external_dag_id, ctx.logical_date, self.external_task_id
            )
        if state in _FAILED:
            raise NonRetryableError(f"{self._watched(ctx)} is {state}")
        return state == RunState.SUCCESS.value

    def _watched(self, ctx: TaskContext) -> str:
        task = f"task '{self.external_task_id}' of " if self.external_task_id else ""
        return f"{task}DAG '{self.external_dag_id}' at {ctx.ts}"


class TimeDeltaSensor(_Sensor):
    """Waits until ``delta`` (seconds, a timedelta or text such as "2h") after the end of
    the run's data interval, by the worker's clock."""

    def __init__(self, task_id: str, delta: Any, **options: Any):
        try:
            self.delta = parse_duration(delta)
        except Exception as exc:
            raise DagDefinitionError(f"delta: {exc}", task_id=task_id) from None
        super().__init__(task_id, **options)

    def poke(self, data_interval_end: datetime) -> bool:
        return datetime.now(UTC) >= data_interval_end + self.delta

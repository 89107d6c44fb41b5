"""Airflow's ``ExternalTaskSensor`` and ``ExternalTaskMarker``, over dagrun's external task
check (``dagrun.runtime.sensors.external_verdict``) and markers (``ExternalMarker``, which
``dagrun clear`` follows: ``dagrun.runtime.markers``).

Airflow's meaning (the standard provider's ``sensors/external_task.py``): the sensor waits
on another DAG's run at this run's logical date (``execution_delta`` earlier, or the dates
``execution_date_fn`` gives): the run itself, some of its tasks, or a task group's tasks.
It is done once all of that is in ``allowed_states`` (default: success) at every date; by
default it never fails because the other DAG failed (it waits until its timeout), unless
``failed_states`` says so; ``skipped_states`` skip it. Failing over a failed state is an
ordinary failure (retries apply), or a skip with ``soft_fail``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from dagrun.airflow.exceptions import AirflowException, AirflowSkipException
from dagrun.airflow.models import Context, DagRunState, TaskInstanceState
from dagrun.airflow.operators import EmptyOperator, determine_kwargs
from dagrun.airflow.sensors import BaseSensorOperator
from dagrun.authoring.sensor_options import ExternalMarker
from dagrun.runtime import current
from dagrun.runtime.sensors import ExternalTarget, Verdict, external_verdict
from dagrun.states import RunState, TaskState

__all__ = ["ExternalTaskMarker", "ExternalTaskSensor"]


class DuplicateStateError(AirflowException, ValueError):
    """A state given in more than one of allowed, skipped and failed states."""


class ExternalTaskNotFoundError(AirflowException):
    """``check_existence``: the DAG, a task or the group is not known."""


class ExternalTaskFailedError(AirflowException):
    """Something watched is in one of the failed states."""


#: The states Airflow accepts for tasks and for DAG runs, and those dagrun has.
_AIRFLOW_TASK_STATES = frozenset(s.value for s in TaskInstanceState)
_AIRFLOW_RUN_STATES = frozenset(s.value for s in DagRunState)
_TASK_STATES = frozenset(s.value for s in TaskState)
_RUN_STATES = frozenset(s.value for s in RunState)


class ExternalTaskSensor(BaseSensorOperator):
    """Waits for a different DAG, task group, or task to complete for a logical date."""

    template_fields: Sequence[str] = (
        "external_dag_id",
        "external_task_id",
        "external_task_ids",
        "external_task_group_id",
    )
    ui_color = "#4db7db"

    def __init__(
        self,
        *,
        external_dag_id: str,
        external_task_id: str | None = None,
        external_task_ids: Collection[str] | None = None,
        external_task_group_id: str | None = None,
        allowed_states: Iterable[str] | None = None,
        skipped_states: Iterable[str] | None = None,
        failed_states: Iterable[str] | None = None,
        execution_delta: timedelta | None = None,
        execution_date_fn: Callable[..., Any] | None = None,
        check_existence: bool = False,
        poll_interval: float = 2.0,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.allowed_states = _names(allowed_states) or [TaskInstanceState.SUCCESS.value]
        self.skipped_states = _names(skipped_states)
        self.failed_states = _names(failed_states)
        given = [*self.allowed_states, *self.skipped_states, *self.failed_states]
        if len(set(given)) != len(given):
            raise DuplicateStateError(
                "Duplicate values provided across allowed_states, skipped_states and failed_states."
            )
        if external_task_id is not None and external_task_ids:
            raise ValueError(
                "Only one of `external_task_id` or `external_task_ids` may be provided to "
                "ExternalTaskSensor; use external_task_id or external_task_ids or "
                "external_task_group_id."
            )
        ids = [external_task_id] if external_task_id is not None else external_task_ids or None
        if external_task_group_id is not None and ids is not None:
            raise ValueError(
                "Only one of `external_task_group_id` or `external_task_ids` may be provided "
                "to ExternalTaskSensor; use external_task_id or external_task_ids or "
                "external_task_group_id."
            )
        on_tasks = ids is not None or external_task_group_id is not None
        known = _AIRFLOW_TASK_STATES if on_tasks else _AIRFLOW_RUN_STATES
        if not set(given) <= known:
            raise ValueError(
                "Valid values for `allowed_states`, `skipped_states` and `failed_states` "
                f"here are: {sorted(known)}"
            )
        if execution_delta is not None and execution_date_fn is not None:
            raise ValueError(
                "Only one of `execution_delta` or `execution_date_fn` may be provided to "
                "ExternalTaskSensor; not both."
            )
        self.execution_delta = execution_delta
        self.execution_date_fn = execution_date_fn
        self.external_dag_id = external_dag_id
        self.external_task_id = external_task_id
        self.external_task_ids = ids
        self.external_task_group_id = external_task_group_id
        self.check_existence = check_existence
        self.poll_interval = poll_interval

    def poke(self, context: Context) -> bool:
        ids = self.external_task_ids
        if ids and len(set(ids)) != len(ids):
            raise ValueError("Duplicate task_ids passed in external_task_ids parameter")
        attempt = current.current()
        db_url = attempt.runs_url if attempt is not None else None
        verdict, reason = external_verdict(self._target(), db_url, self._dates(context))
        self.log.info("Poking for %s", reason)
        if verdict == Verdict.FAILED:
            if self.soft_fail:
                raise AirflowSkipException(f"{reason}. Skipping due to soft_fail.")
            raise ExternalTaskFailedError(reason)
        if verdict == Verdict.SKIPPED:
            raise AirflowSkipException(f"{reason}: in a state to skip on. Skipping.")
        if verdict == Verdict.MISSING:
            raise ExternalTaskNotFoundError(reason)
        return verdict == Verdict.DONE

    def _target(self) -> ExternalTarget:
        """What to watch, the ids as rendered; states dagrun never gives (``removed``,
        ``deferred`` ...) left out."""
        ids = self.external_task_ids
        on_run = ids is None and self.external_task_group_id is None
        dagrun_states = _RUN_STATES if on_run else _TASK_STATES
        return ExternalTarget(
            self.external_dag_id,
            None if ids is None else tuple(ids),
            self.external_task_group_id,
            frozenset(self.allowed_states) & dagrun_states,
            frozenset(self.failed_states) & dagrun_states,
            frozenset(self.skipped_states) & dagrun_states,
            bool(self.check_existence),
        )

    def _dates(self, context: Context) -> list[datetime]:
        """The other DAG's logical dates to look at: this run's, ``execution_delta``
        earlier, or what ``execution_date_fn(logical_date, **context)`` returns (one date
        or a list; it may also take ``context``)."""
        logical_date = context["logical_date"]
        if self.execution_delta is not None:
            return [logical_date - self.execution_delta]
        if self.execution_date_fn is None:
            return [logical_date]
        names = {k: v for k, v in context.items() if k not in ("logical_date", "execution_date")}
        names["context"] = context
        kwargs = determine_kwargs(self.execution_date_fn, [logical_date], names)
        found = self.execution_date_fn(logical_date, **kwargs)
        return list(found) if isinstance(found, list | tuple) else [found]


def _names(states: Iterable[Any] | None) -> list[str]:
    return [getattr(s, "value", s) for s in states or ()]


class ExternalTaskMarker(EmptyOperator):
    """Does nothing when it runs; clearing it (``dagrun clear``, chosen or with
    ``--downstream``) also clears task ``external_task_id`` of DAG ``external_dag_id`` and
    what is downstream of it, in that DAG's runs at ``logical_date`` (a template; Airflow
    2's name ``execution_date`` too), following the markers there, at most
    ``recursion_depth`` DAGs deep."""

    template_fields: Sequence[str] = ("external_dag_id", "external_task_id", "logical_date")
    ui_color = "#4db7db"

    def __init__(
        self,
        *,
        external_dag_id: str,
        external_task_id: str,
        logical_date: str | datetime | None = "{{ logical_date.isoformat() }}",
        execution_date: str | datetime | None = None,
        recursion_depth: int = 10,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.external_dag_id = external_dag_id
        self.external_task_id = external_task_id
        when = execution_date if execution_date is not None else logical_date
        if isinstance(when, datetime):
            when = when.isoformat()
        if not isinstance(when, str):
            raise TypeError(
                f"Expected str or datetime.datetime type for logical_date. Got {type(when)}"
            )
        self.logical_date = when
        if recursion_depth <= 0:
            raise ValueError("recursion_depth should be a positive integer")
        self.recursion_depth = recursion_depth

    @property
    def execution_date(self) -> str:
        """Airflow 2's name of ``logical_date``."""
        return self.logical_date

    @property
    def marker(self) -> ExternalMarker:
        """What clearing it follows (kept in the spec)."""
        return ExternalMarker(
            self.external_dag_id, self.external_task_id, self.logical_date, self.recursion_depth
        )

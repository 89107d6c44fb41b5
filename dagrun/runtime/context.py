"""The run context a task receives: dates in the DAG's timezone, ids, fencing for effects.

A task callable declares the names it wants (``ds``, ``data_interval_start``, ``ctx`` ...);
templates see the same names. While an attempt runs, ``current.current()`` returns its
context so helpers such as partitions can fence their writes without the task passing
anything along.

Airflow's names (``ti``, ``dag_run``, ``prev_data_interval_start_success`` ...) are
attributes too, computed when first asked for: the ones that read the store (the previous
successful run, a run's type) cost nothing to a task that does not use them, and a template
is rendered with the names it uses only (``names(wanted)``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property
from types import ModuleType
from typing import Any
from zoneinfo import ZoneInfo

from dagrun.authoring import macros
from dagrun.authoring.context_names import ALL_CONTEXT_NAMES, CONTEXT_NAMES
from dagrun.runtime.connections import CONN, ConnectionAccessor
from dagrun.runtime.task_instance import (
    DagRun,
    TaskInstance,
    previous_success,
    triggering_events,
)
from dagrun.runtime.variables import VAR, VariableAccessor


@dataclass(frozen=True)
class TaskContext:
    """Everything an attempt knows about itself (DESIGN section 2)."""

    dag_id: str
    task_id: str
    run_id: str
    logical_date: datetime
    data_interval_start: datetime
    data_interval_end: datetime
    try_number: int
    params: dict[str, Any] = field(default_factory=dict)
    #: The run's conf as given (``--conf``); ``params`` holds it checked and merged.
    conf: dict[str, Any] = field(default_factory=dict)
    fence_token: int = 0
    ti_id: int | None = None
    db_url: str | None = None
    #: The run's key in the store (XComs are read by it); None outside a stored run.
    run_pk: int | None = None
    map_index: int = -1
    #: The task object of the DAG file (Airflow's ``task``); None where it is not loaded.
    task: Any = None
    #: Whether the attempt runs under ``dagrun tasks test`` (Airflow's ``test_mode``).
    test_mode: bool = False
    #: Where other DAGs' runs are read, when not ``db_url`` (``dagrun test``'s real store).
    history_url: str | None = None
    #: A sensor pokes once and hands its wait to the store (``dagrun test``).
    poke_once: bool = False
    #: What the attempt pushed (``ti.xcom_push``), key -> JSON text: sent back with its
    #: result and written with its completion.
    pushed: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def ds(self) -> str:
        return self.logical_date.strftime("%Y-%m-%d")

    @property
    def ds_nodash(self) -> str:
        return self.logical_date.strftime("%Y%m%d")

    @property
    def ts(self) -> str:
        """The logical date in ISO 8601 with its offset (``2026-01-05T00:00:00+06:00``)."""
        return self.logical_date.isoformat()

    @property
    def ts_nodash(self) -> str:
        return self.logical_date.strftime("%Y%m%dT%H%M%S")

    @property
    def macros(self) -> ModuleType:
        return macros

    @property
    def idempotency_key(self) -> str:
        """Stable across retries and reruns of the same task and date: dedupe effects on it."""
        return f"{self.dag_id}/{self.task_id}/{self.logical_date.isoformat()}"

    @property
    def ctx(self) -> TaskContext:
        return self

    @property
    def var(self) -> VariableAccessor:
        """Variables by key (``var.value.key``): one object for every context, reading
        nothing until a template or task asks for a key, so ``names()`` stays cheap."""
        return VAR

    @property
    def conn(self) -> ConnectionAccessor:
        """Connections by id (``conn.my_db.host``), read only when asked for, as ``var``."""
        return CONN

    @property
    def runs_url(self) -> str | None:
        """The store other DAGs' runs are read from (an ExternalTaskSensor's)."""
        return self.history_url or self.db_url

    def attach(self, task: Any) -> None:
        """Set ``task``, the one field filled after the context is made: an attempt finds
        its task by importing the DAG file, which may read variables through the context
        already. Done in place (no copy per attempt, on the hot path) before any name is
        computed from it."""
        object.__setattr__(self, "task", task)

    def names(self, wanted: Iterable[str] = CONTEXT_NAMES) -> dict[str, Any]:
        """The values of the ``wanted`` context names (dagrun's own by default), for
        injection and templates; a name that is not a context name is left out."""
        return {name: getattr(self, name) for name in wanted if name in _KNOWN}

    def all_names(self) -> dict[str, Any]:
        """Every context name, Airflow's included: what a task made by ``dagrun.airflow``
        gets through ``**kwargs`` and its ``execute(context)``."""
        return self.names(ALL_CONTEXT_NAMES)

    # ---------------------------------------------------------- Airflow's names

    @cached_property
    def ti(self) -> TaskInstance:
        """The task instance: ids, try number, ``xcom_push`` and ``xcom_pull``."""
        return TaskInstance(self)

    @property
    def task_instance(self) -> TaskInstance:
        return self.ti

    @property
    def dag(self) -> Any:
        return getattr(self.task, "dag", None)

    @cached_property
    def dag_run(self) -> DagRun:
        return DagRun(self)

    @property
    def run_type(self) -> str:
        """How the run was made (``scheduled``, ``backfill``, ``manual``, ``asset``), read
        from its id, which begins with it for every run dagrun names itself."""
        prefix = self.run_id.split("__", 1)[0]
        return prefix if prefix in _RUN_TYPES else "manual"

    @property
    def task_instance_key_str(self) -> str:
        return f"{self.dag_id}__{self.task_id}__{self.ds_nodash}"

    @property
    def execution_date(self) -> datetime:
        """Airflow 2's name for the logical date."""
        return self.logical_date

    @property
    def next_execution_date(self) -> datetime:
        """Airflow 2's next logical date: the end of this run's data interval."""
        return self.data_interval_end

    @property
    def next_ds(self) -> str:
        return self.data_interval_end.strftime("%Y-%m-%d")

    @property
    def next_ds_nodash(self) -> str:
        return self.data_interval_end.strftime("%Y%m%d")

    @property
    def prev_execution_date(self) -> datetime:
        """Airflow 2's previous logical date: one data interval before this run's."""
        return self.logical_date - (self.data_interval_end - self.data_interval_start)

    @property
    def prev_ds(self) -> str:
        return self.prev_execution_date.strftime("%Y-%m-%d")

    @property
    def prev_ds_nodash(self) -> str:
        return self.prev_execution_date.strftime("%Y%m%d")

    @property
    def yesterday_ds(self) -> str:
        return (self.logical_date - timedelta(days=1)).strftime("%Y-%m-%d")

    @property
    def yesterday_ds_nodash(self) -> str:
        return (self.logical_date - timedelta(days=1)).strftime("%Y%m%d")

    @property
    def tomorrow_ds(self) -> str:
        return (self.logical_date + timedelta(days=1)).strftime("%Y-%m-%d")

    @property
    def tomorrow_ds_nodash(self) -> str:
        return (self.logical_date + timedelta(days=1)).strftime("%Y%m%d")

    @property
    def ts_nodash_with_tz(self) -> str:
        return self.ts.replace("-", "").replace(":", "")

    @property
    def prev_data_interval_start_success(self) -> datetime | None:
        return self._previous_success("data_interval_start")

    @property
    def prev_data_interval_end_success(self) -> datetime | None:
        return self._previous_success("data_interval_end")

    @property
    def prev_start_date_success(self) -> datetime | None:
        return self._previous_success("start_date")

    @property
    def prev_end_date_success(self) -> datetime | None:
        return self._previous_success("end_date")

    def _previous_success(self, field_name: str) -> datetime | None:
        """A field of the DAG's newest successful run before this one, in the DAG's zone."""
        found = self._previous_success_run
        value = getattr(found, field_name) if found is not None else None
        return value.astimezone(self.logical_date.tzinfo) if value is not None else None

    @cached_property
    def _previous_success_run(self) -> Any:
        return previous_success(self)

    @property
    def inlets(self) -> list[Any]:
        return list(getattr(self.task, "inlets", None) or [])

    @property
    def outlets(self) -> list[Any]:
        return list(getattr(self.task, "outlets", None) or [])

    @cached_property
    def triggering_asset_events(self) -> dict[str, list[Any]]:
        """The asset events an asset-triggered run was made from, by asset (empty for
        other runs)."""
        return triggering_events(self)

    @property
    def triggering_dataset_events(self) -> dict[str, list[Any]]:
        return self.triggering_asset_events


def make_context(
    *,
    dag_id: str,
    task_id: str,
    run_id: str,
    timezone: str,
    logical_date: datetime,
    data_interval_start: datetime,
    data_interval_end: datetime,
    try_number: int = 1,
    params: dict[str, Any] | None = None,
    conf: dict[str, Any] | None = None,
    fence_token: int = 0,
    ti_id: int | None = None,
    db_url: str | None = None,
    **more: Any,
) -> TaskContext:
    """Build a context with every instant converted to the DAG's timezone; ``more`` are
    the other fields (``run_pk``, ``map_index``, ``task``, ``test_mode``)."""
    tz = ZoneInfo(timezone)
    return TaskContext(
        dag_id=dag_id,
        task_id=task_id,
        run_id=run_id,
        logical_date=logical_date.astimezone(tz),
        data_interval_start=data_interval_start.astimezone(tz),
        data_interval_end=data_interval_end.astimezone(tz),
        try_number=try_number,
        params=dict(params or {}),
        conf=dict(conf or {}),
        fence_token=fence_token,
        ti_id=ti_id,
        db_url=db_url,
        **more,
    )


_KNOWN = frozenset(ALL_CONTEXT_NAMES)
_RUN_TYPES = frozenset({"scheduled", "backfill", "manual", "asset", "test"})

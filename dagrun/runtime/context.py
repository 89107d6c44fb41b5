"""The run context a task receives: dates in the DAG's timezone, ids, fencing for effects.

A task callable declares the names it wants (``ds``, ``data_interval_start``, ``ctx`` ...);
templates see the same names. While an attempt runs, ``current.current()`` returns its
context so helpers such as partitions can fence their writes without the task passing
anything along.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from types import ModuleType
from typing import Any
from zoneinfo import ZoneInfo

from dagrun.authoring import macros
from dagrun.authoring.context_names import CONTEXT_NAMES
from dagrun.runtime.connections import CONN, ConnectionAccessor
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

    def names(self) -> dict[str, Any]:
        """The values by context name, for injection and for templates."""
        return {name: getattr(self, name) for name in CONTEXT_NAMES}


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
) -> TaskContext:
    """Build a context with every instant converted to the DAG's timezone."""
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
    )

"""The running task instance as Airflow's context shows it: ``ti`` (ids, try number,
``xcom_push`` and ``xcom_pull``) and ``dag_run`` (the run's dates, conf and type).

``xcom_push`` keeps the value with the attempt (``TaskContext.pushed``): the runner sends it
back with the attempt's result and the store writes it with the fenced completion, so an
attempt that lost its lease pushes nothing. ``xcom_pull`` reads the attempt's store: the
return values and pushes of the run's other tasks (``dagrun.store.xcoms``). Values are JSON,
limited in size as return values are.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from dagrun import settings
from dagrun.errors import NonRetryableError

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from dagrun.runtime.context import TaskContext

#: The largest JSON text of one return value or pushed value.
MAX_VALUE_BYTES: int = settings.get("core.max_xcom_bytes")
RETURN_KEY = "return_value"
T = TypeVar("T")


def encode(value: Any, what: str) -> str:
    """``value`` as the JSON text the store keeps. A value that is not JSON (TypeError) or
    is larger than ``MAX_VALUE_BYTES`` (ValueError) fails the attempt, saying what it was."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"{what} is not JSON-serialisable ({exc}); write bulk data to a partition"
        ) from None
    if len(text) > MAX_VALUE_BYTES:
        raise ValueError(
            f"{what} is {len(text)} bytes (limit DAGRUN_MAX_XCOM_BYTES={MAX_VALUE_BYTES}); "
            "write bulk data to a partition"
        )
    return text


class TaskInstance:
    """Airflow's ``ti``: what a task knows of its own instance, and XComs."""

    def __init__(self, context: TaskContext):
        self._context = context

    def __repr__(self) -> str:
        c = self._context
        return f"<TaskInstance: {c.dag_id}.{c.task_id} {c.run_id} [running]>"

    dag_id = property(lambda self: self._context.dag_id)
    task_id = property(lambda self: self._context.task_id)
    run_id = property(lambda self: self._context.run_id)
    try_number = property(lambda self: self._context.try_number)
    map_index = property(lambda self: self._context.map_index)
    logical_date = property(lambda self: self._context.logical_date)
    execution_date = property(lambda self: self._context.logical_date)
    task = property(lambda self: self._context.task)
    state = property(lambda self: "running")
    hostname = property(lambda self: socket.gethostname())

    @property
    def dag_run(self) -> DagRun:
        return self._context.dag_run

    @property
    def max_tries(self) -> int:
        return int(getattr(self._context.task, "retries", 0) or 0)

    def xcom_push(self, key: str, value: Any, **_ignored: Any) -> None:
        """Keep ``value`` under ``key`` for downstream tasks (written when the attempt
        ends; its return value is under ``return_value``)."""
        if not isinstance(key, str) or not key:
            raise NonRetryableError(f"xcom_push needs a non-empty key, not {key!r}")
        self._context.pushed[key] = encode(value, f"XCom {key!r} of task '{self.task_id}'")

    def xcom_pull(
        self,
        task_ids: str | Iterable[str] | None = None,
        dag_id: str | None = None,
        key: str | None = RETURN_KEY,
        include_prior_dates: bool = False,
        *,
        map_indexes: int | Iterable[int] | None = None,
        default: Any = None,
        run_id: str | None = None,
    ) -> Any:
        """The value ``task_ids`` (one id, or a list) pushed under ``key`` in this run, as
        Airflow returns it: one task's value (a mapped task's as the list of its indexes'
        values, or the value of one index with ``map_indexes=i``), a list of values for a
        list of ids; ``default`` where there is none. Without ``task_ids``, this task's own
        earlier push (Airflow 3's meaning). Other DAGs and runs are not read here."""
        if dag_id not in (None, self.dag_id) or run_id not in (None, self.run_id):
            raise NonRetryableError("xcom_pull reads the current DAG run only")
        if task_ids is None:
            task_ids = self.task_id
        single = isinstance(task_ids, str)
        ids = [task_ids] if isinstance(task_ids, str) else list(task_ids)
        found = _read(self._context, ids, key)
        values = [_value_of(found.get(t), map_indexes, default) for t in ids]
        return values[0] if single else values


def _value_of(by_index: dict[int, Any] | None, map_indexes: Any, default: Any) -> Any:
    """One task's value from its instances' values by map index."""
    if not by_index:
        return default
    if isinstance(map_indexes, int):
        return by_index.get(map_indexes, default)
    if map_indexes is not None:
        return [by_index.get(i, default) for i in map_indexes]
    if list(by_index) == [-1]:
        return by_index[-1]
    return [by_index[i] for i in sorted(by_index) if i >= 0]


def _read(context: TaskContext, task_ids: list[str], key: str | None) -> dict[str, dict[int, Any]]:
    """What ``task_ids`` left under ``key`` in the attempt's run; this attempt's own pushes
    first, since they are not in the store yet."""
    from dagrun.store import xcoms

    nothing: dict[str, dict[int, Any]] = {}
    found = in_run(context, lambda conn, run_pk: xcoms.pull(conn, run_pk, task_ids, key), nothing)
    pushed = list(context.pushed.values()) if key is None else [context.pushed.get(key)]
    if context.task_id in task_ids and pushed and pushed[-1] is not None:
        found.setdefault(context.task_id, {})[context.map_index] = json.loads(pushed[-1])
    return found


class DagRun:
    """Airflow's ``dag_run``: the run's ids, dates, conf and type."""

    def __init__(self, context: TaskContext):
        self._context = context

    def __repr__(self) -> str:
        return f"<DagRun {self.dag_id} @ {self.logical_date.isoformat()}: {self.run_id}>"

    dag_id = property(lambda self: self._context.dag_id)
    run_id = property(lambda self: self._context.run_id)
    logical_date = property(lambda self: self._context.logical_date)
    execution_date = property(lambda self: self._context.logical_date)
    data_interval_start = property(lambda self: self._context.data_interval_start)
    data_interval_end = property(lambda self: self._context.data_interval_end)
    conf = property(lambda self: self._context.conf)
    run_type = property(lambda self: self._context.run_type)
    external_trigger = property(lambda self: self._context.run_type == "manual")
    state = property(lambda self: "running")

    @property
    def start_date(self) -> datetime | None:
        found = _run_row(self._context)
        return found.start_date if found is not None else None


def in_run(context: TaskContext, read: Callable[[Connection, int], T], missing: T) -> T:
    """What ``read`` finds in the attempt's store, given its run's key; ``missing`` outside
    a stored run (``dagrun tasks test``). The store is imported here, when a task asks:
    a process importing a DAG file does not pay for SQLAlchemy."""
    if context.run_pk is None or context.db_url is None:
        return missing
    from dagrun.store.engine import shared_store

    with shared_store(context.db_url).read() as conn:
        return read(conn, context.run_pk)


def _run_row(context: TaskContext) -> Any:
    from dagrun.store import run_reads

    return in_run(context, run_reads.run_by_pk, None)


def previous_success(context: TaskContext) -> Any:
    """The DAG's newest successful run before this run's logical date (a ``RunRow``), or
    None; outside a stored run, None."""
    from dagrun.store import run_reads

    return in_run(
        context,
        lambda conn, _: run_reads.previous_success(conn, context.dag_id, context.logical_date),
        None,
    )


def triggering_events(context: TaskContext) -> dict[str, list[Any]]:
    """The asset events the run was made from, by asset; outside a stored run, none."""
    from dagrun.store import asset_triggers

    return in_run(
        context, lambda conn, run_pk: dict(asset_triggers.triggering_events(conn, run_pk)), {}
    )

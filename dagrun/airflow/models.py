"""Airflow's configuration and vocabulary objects over dagrun's: ``Variable``, ``Param``,
``Connection`` and ``BaseHook``, ``TriggerRule``, the state enums, ``Context`` and the date
helpers of ``airflow.utils`` (``days_ago``, ``timezone.utcnow`` and ``timezone.datetime``).

Variables and connections are dagrun's own (the store, or ``DAGRUN_VAR_*`` and
``DAGRUN_CONN_*``), with Airflow's spellings of their methods on top.
"""

from __future__ import annotations

import json
from datetime import UTC, timedelta
from datetime import datetime as _datetime
from enum import StrEnum
from typing import Any

from dagrun.authoring.params import Param
from dagrun.runtime import connections, variables
from dagrun.states import TriggerRule

__all__ = [
    "BaseHook",
    "Connection",
    "Context",
    "DagRunState",
    "Param",
    "ParamsDict",
    "State",
    "TaskInstanceState",
    "TriggerRule",
    "Variable",
    "aware_datetime",
    "days_ago",
    "utcnow",
]

_NOT_SET: Any = object()


class Variable(variables.Variable):
    """Airflow's ``Variable``: ``get(key, default_var=...)`` (2.x) or ``default=`` (3.x)."""

    @staticmethod
    def get(  # type: ignore[override]
        key: str,
        default_var: Any = _NOT_SET,
        deserialize_json: bool = False,
        *,
        default: Any = _NOT_SET,
    ) -> Any:
        fallback = default if default is not _NOT_SET else default_var
        if fallback is _NOT_SET:
            return variables.Variable.get(key, deserialize_json=deserialize_json)
        return variables.Variable.get(key, fallback, deserialize_json)

    @staticmethod
    def set(  # type: ignore[override]
        key: str, value: Any, description: str | None = None, serialize_json: bool = False
    ) -> None:
        """Airflow's argument order; a value that is not text is stored as its ``str``
        unless ``serialize_json``, as Airflow stores it."""
        if not serialize_json and not isinstance(value, str):
            value = str(value)
        variables.Variable.set(key, value, serialize_json, description)

    @staticmethod
    def setdefault(key: str, default: Any, deserialize_json: bool = False) -> Any:
        """The value of ``key``, first set to ``default`` when there is none."""
        found = Variable.get(key, None, deserialize_json)
        if found is None:
            Variable.set(key, default, serialize_json=deserialize_json)
            return default
        return found


class ParamsDict(dict):
    """A DAG's params as Airflow hands them over: a plain mapping of name to value."""


class Connection:
    """Airflow's ``Connection``: dagrun's fields, ``extra`` as JSON text and
    ``extra_dejson`` as the dict, ``get_uri``; read with ``BaseHook.get_connection``."""

    def __init__(self, found: connections.Connection):
        self._found = found

    @classmethod
    def get(cls, conn_id: str) -> Connection:
        return cls(connections.Connection.get(conn_id))

    get_connection_from_secrets = get

    def __getattr__(self, name: str) -> Any:
        return getattr(self._found, name)

    @property
    def extra(self) -> str:
        return json.dumps(self._found.extra) if self._found.extra else ""

    @property
    def extra_dejson(self) -> dict[str, Any]:
        return dict(self._found.extra)

    def get_uri(self) -> str:
        return self._found.get_uri()

    def __repr__(self) -> str:
        return f"Connection({self._found.conn_id!r})"


class BaseHook:
    """Airflow's base of hooks: ``get_connection(conn_id)``. A file's own hook subclasses
    it and reads its connection the same way."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    @classmethod
    def get_connection(cls, conn_id: str) -> Connection:
        return Connection.get(conn_id)


class TaskInstanceState(StrEnum):
    """Airflow's task instance states; dagrun's are the same words (``none`` aside)."""

    REMOVED = "removed"
    SCHEDULED = "scheduled"
    QUEUED = "queued"
    RUNNING = "running"
    SUCCESS = "success"
    RESTARTING = "restarting"
    FAILED = "failed"
    UP_FOR_RETRY = "up_for_retry"
    UP_FOR_RESCHEDULE = "up_for_reschedule"
    UPSTREAM_FAILED = "upstream_failed"
    SKIPPED = "skipped"
    DEFERRED = "deferred"


class DagRunState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"


class State:
    """Airflow's ``State``: every task and run state as a class attribute."""

    NONE = None
    REMOVED = TaskInstanceState.REMOVED
    SCHEDULED = TaskInstanceState.SCHEDULED
    QUEUED = TaskInstanceState.QUEUED
    RUNNING = TaskInstanceState.RUNNING
    SUCCESS = TaskInstanceState.SUCCESS
    RESTARTING = TaskInstanceState.RESTARTING
    FAILED = TaskInstanceState.FAILED
    UP_FOR_RETRY = TaskInstanceState.UP_FOR_RETRY
    UP_FOR_RESCHEDULE = TaskInstanceState.UP_FOR_RESCHEDULE
    UPSTREAM_FAILED = TaskInstanceState.UPSTREAM_FAILED
    SKIPPED = TaskInstanceState.SKIPPED
    DEFERRED = TaskInstanceState.DEFERRED
    finished = frozenset({SUCCESS, FAILED, SKIPPED, UPSTREAM_FAILED, REMOVED})
    failed_states = frozenset({FAILED, UPSTREAM_FAILED})
    success_states = frozenset({SUCCESS, SKIPPED})


class Context(dict):
    """The mapping of context names to values a task's ``execute`` and callbacks receive."""


def utcnow() -> _datetime:
    return _datetime.now(UTC)


def aware_datetime(*args: Any, **kwargs: Any) -> _datetime:
    """``airflow.utils.timezone.datetime``: a datetime in UTC unless given a tzinfo."""
    kwargs.setdefault("tzinfo", UTC)
    return _datetime(*args, **kwargs)


def days_ago(n: int, hour: int = 0, minute: int = 0, second: int = 0) -> _datetime:
    """Midnight UTC today (or the given time of day), ``n`` days ago (Airflow 2's helper)."""
    today = utcnow().replace(hour=hour, minute=minute, second=second, microsecond=0)
    return today - timedelta(days=n)

"""The attempt this process is running now, if any: its context, and so its database.

A leaf of the runtime: variables, connections and partitions read it to reach the
attempt's store and fence their writes, and the context itself reads variables and
connections (``var``, ``conn``), so the running attempt is kept apart from both.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dagrun.runtime.context import TaskContext

_current: ContextVar[TaskContext | None] = ContextVar("dagrun_task_context", default=None)


def current() -> TaskContext | None:
    """The context of the attempt running in this process, if any."""
    return _current.get()


def db_url() -> str | None:
    """The database of the attempt running in this process; None outside an attempt (or
    in one run without a store), where variables and connections come from this process's
    own database."""
    context = _current.get()
    return context.db_url if context is not None else None


def set_current(context: TaskContext | None) -> None:
    _current.set(context)

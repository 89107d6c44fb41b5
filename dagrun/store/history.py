"""How long a DAG's recent runs and their tasks took: the one read of the durations chart.

Two statements whatever N is: the runs by the ``(dag_id, logical_date)`` index, newest
first with a LIMIT, then their instances by the ``(run_pk, task_id, map_index)`` unique
index, grouped in SQL so a mapped task of a thousand indexes costs one row per run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from dagrun.store import sql

if TYPE_CHECKING:
    from sqlalchemy import Connection


#: The statements of this module (``queries/history.py``).
Q = sql.Catalogue("dagrun.store.queries.history", "history.")


@dataclass(frozen=True)
class RunDurations:
    """One run and how long it and each of its tasks took (seconds; a task without a
    recorded duration is absent). A mapped task's duration is its slowest index's: the one
    that held its downstream back."""

    run_id: str
    logical_date: datetime
    state: str
    start_date: datetime | None
    end_date: datetime | None
    tasks: dict[str, float] = field(default_factory=dict)

    @property
    def duration(self) -> float | None:
        if self.start_date and self.end_date:
            return (self.end_date - self.start_date).total_seconds()
        return None


def recent_durations(conn: Connection, dag_id: str, limit: int) -> list[RunDurations]:
    """The last ``limit`` runs of ``dag_id`` by logical date, oldest first, with their
    tasks' durations."""
    rows = sql.tuples(conn, Q.NEWEST_RUNS, {"b_dag_id": dag_id, "b_limit": limit})[::-1]
    found = {pk: RunDurations(*rest) for pk, *rest in rows}
    if not found:
        return []
    for run_pk, task_id, seconds in sql.tuples(conn, Q.SLOWEST, {"b_run_pks": list(found)}):
        found[run_pk].tasks[task_id] = float(seconds)
    return list(found.values())

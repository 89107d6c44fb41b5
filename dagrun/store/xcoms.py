"""XComs: what a task pushed beside its return value (``ti.xcom_push(key, value)``), and the
reads of both that ``ti.xcom_pull`` makes.

A task's return value stays where TaskFlow keeps it (``task_instance.return_value``); the
other keys live in ``xcom``, one row per task instance and key, JSON text. They are written
by the attempt's completion, in its transaction and only when its fenced update landed
(``attempts.complete``), replacing what the task instance's earlier attempts pushed (a
cleared task's included, as Airflow clears a task's XComs when it runs again): an attempt
that lost its lease pushes nothing, as it changes nothing else.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from dagrun.store import run_reads, sql

if TYPE_CHECKING:
    from sqlalchemy import Connection


#: The statements of this module (``queries/xcoms.py``).
Q = sql.Catalogue("dagrun.store.queries.xcoms", "xcoms.")

if TYPE_CHECKING:
    from dagrun.store.attempts import Outcome

#: The key of a task's return value, as Airflow names it.
RETURN_KEY = "return_value"


def record_pushed(conn: Connection, accepted: Iterable[Outcome], now: datetime) -> None:
    """Replace the pushes of the accepted attempts that pushed something (most push
    nothing, and cost one look each)."""
    pushing = [o for o in accepted if o.xcoms]
    if not pushing:
        return
    where = [
        {"b_run_pk": o.run_pk, "b_task_id": o.task_id, "b_map_index": o.map_index} for o in pushing
    ]
    sql.execute_many(conn, Q.DROP_PUSHED, where)
    rows = [
        {**place, "b_key": key, "b_value": value, "b_created_at": now}
        for o, place in zip(pushing, where, strict=True)
        for key, value in (o.xcoms or {}).items()
    ]
    sql.execute_many(conn, Q.INSERT_PUSHED, rows)


def pull(
    conn: Connection, run_pk: int, task_ids: Sequence[str], key: str | None = RETURN_KEY
) -> dict[str, dict[int, Any]]:
    """The values of ``task_ids`` in a run under ``key``, decoded, by task id and map index
    (-1 for a task that is not mapped); a task with none is absent. With no key, each
    instance's return value, or else what it pushed last (Airflow 2's ``key=None``)."""
    if key == RETURN_KEY:
        return _values(conn, run_reads.Q.UPSTREAM_VALUES, run_pk, task_ids)
    if key is not None:
        return _values(conn, Q.PULL_PUSHED, run_pk, task_ids, {"b_key": key})
    found = _values(conn, Q.PULL_ANY_PUSHED, run_pk, task_ids)  # the newest key wins
    for task_id, values in _values(conn, run_reads.Q.UPSTREAM_VALUES, run_pk, task_ids).items():
        found.setdefault(task_id, {}).update(values)
    return found


def _values(
    conn: Connection,
    statement: sql.Named,
    run_pk: int,
    task_ids: Sequence[str],
    more: dict[str, Any] | None = None,
) -> dict[str, dict[int, Any]]:
    params = {"b_run_pk": run_pk, "b_task_ids": sorted(set(task_ids)), **(more or {})}
    found: dict[str, dict[int, Any]] = {}
    for task_id, map_index, value in sql.tuples(conn, statement, params):
        if value is not None:
            found.setdefault(task_id, {})[map_index] = json.loads(value)
    return found


# ---------------------------------------------------------------- a task instance's values


@dataclass(frozen=True)
class StoredValue:
    """A value a task instance left, as a page shows it: its key (``RETURN_KEY`` for its
    return value), its size in characters of JSON text, and its first characters."""

    key: str
    size: int
    head: str

    @property
    def whole(self) -> bool:
        return len(self.head) == self.size


def instance_values(
    conn: Connection, ti_id: int, run_pk: int, task_id: str, map_index: int, head: int
) -> list[StoredValue]:
    """A task instance's return value (first, if it has one) and what it pushed, each cut
    to its first ``head`` characters: a page never reads a huge value whole."""
    found = [
        StoredValue(RETURN_KEY, size, text)
        for size, text in sql.tuples(conn, Q.RETURN_VALUE_HEAD, {"b_ti_id": ti_id, "b_head": head})
    ]
    where = {"b_run_pk": run_pk, "b_task_id": task_id, "b_map_index": map_index, "b_head": head}
    found += [StoredValue(*row) for row in sql.tuples(conn, Q.PUSHED_HEADS, where)]
    return found


def instance_value(
    conn: Connection, ti_id: int, run_pk: int, task_id: str, map_index: int, key: str
) -> str | None:
    """The whole JSON text a task instance left under ``key`` (its return value for
    ``RETURN_KEY``, else what it pushed); None when it left nothing there."""
    if key == RETURN_KEY:
        return sql.scalar(conn, Q.RETURN_VALUE, {"b_ti_id": ti_id})
    where = {"b_run_pk": run_pk, "b_task_id": task_id, "b_map_index": map_index, "b_key": key}
    return sql.scalar(conn, Q.PUSHED_VALUE, where)

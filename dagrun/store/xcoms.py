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

from sqlalchemy import Connection, Integer, and_, delete, func, insert, select

from dagrun.store import run_reads, sql
from dagrun.store.schema import task_instance as ti
from dagrun.store.schema import xcom
from dagrun.store.sql import Statement, binds, name_all
from dagrun.store.sql import bind as _b
from dagrun.store.sql import bind_list as _many

if TYPE_CHECKING:
    from dagrun.store.attempts import Outcome

#: The key of a task's return value, as Airflow names it.
RETURN_KEY = "return_value"

DROP_PUSHED = Statement(
    "Forget what a task instance's earlier attempts pushed, before its latest attempt's.",
    delete(xcom).where(
        xcom.c.run_pk == _b("run_pk"),
        xcom.c.task_id == _b("task_id"),
        xcom.c.map_index == _b("map_index"),
    ),
)
INSERT_PUSHED = Statement(
    "Record one value a task instance pushed under a key.",
    insert(xcom).values(**binds("run_pk task_id map_index key value created_at")),
)
PULL_PUSHED = Statement(
    "The values some tasks of a run pushed under one key, a mapped task's in index order.",
    select(xcom.c.task_id, xcom.c.map_index, xcom.c.value)
    .where(
        and_(
            xcom.c.run_pk == _b("run_pk"),
            xcom.c.task_id.in_(_many("task_ids")),
            xcom.c.key == _b("key"),
        )
    )
    .order_by(xcom.c.task_id, xcom.c.map_index),
)


def record_pushed(conn: Connection, accepted: Iterable[Outcome], now: datetime) -> None:
    """Replace the pushes of the accepted attempts that pushed something (most push
    nothing, and cost one look each)."""
    pushing = [o for o in accepted if o.xcoms]
    if not pushing:
        return
    where = [
        {"b_run_pk": o.run_pk, "b_task_id": o.task_id, "b_map_index": o.map_index} for o in pushing
    ]
    sql.execute_many(conn, DROP_PUSHED, where)
    rows = [
        {**place, "b_key": key, "b_value": value, "b_created_at": now}
        for o, place in zip(pushing, where, strict=True)
        for key, value in (o.xcoms or {}).items()
    ]
    sql.execute_many(conn, INSERT_PUSHED, rows)


PULL_ANY_PUSHED = Statement(
    "What some tasks of a run pushed under any key, newest last (Airflow 2's key=None).",
    select(xcom.c.task_id, xcom.c.map_index, xcom.c.value)
    .where(xcom.c.run_pk == _b("run_pk"), xcom.c.task_id.in_(_many("task_ids")))
    .order_by(xcom.c.created_at, xcom.c.key),
)


def pull(
    conn: Connection, run_pk: int, task_ids: Sequence[str], key: str | None = RETURN_KEY
) -> dict[str, dict[int, Any]]:
    """The values of ``task_ids`` in a run under ``key``, decoded, by task id and map index
    (-1 for a task that is not mapped); a task with none is absent. With no key, each
    instance's return value, or else what it pushed last (Airflow 2's ``key=None``)."""
    if key == RETURN_KEY:
        return _values(conn, run_reads.UPSTREAM_VALUES, run_pk, task_ids)
    if key is not None:
        return _values(conn, PULL_PUSHED, run_pk, task_ids, {"b_key": key})
    found = _values(conn, PULL_ANY_PUSHED, run_pk, task_ids)  # the newest key wins
    for task_id, values in _values(conn, run_reads.UPSTREAM_VALUES, run_pk, task_ids).items():
        found.setdefault(task_id, {}).update(values)
    return found


def _values(
    conn: Connection,
    statement: Statement,
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


_HEAD = _b("head", type_=Integer)
RETURN_VALUE_HEAD = Statement(
    "A task instance's return value: its size, and its first ``b_head`` characters.",
    select(func.length(ti.c.return_value), func.substr(ti.c.return_value, 1, _HEAD)).where(
        ti.c.id == _b("ti_id"), ti.c.return_value.is_not(None)
    ),
)
_INSTANCE = and_(
    xcom.c.run_pk == _b("run_pk"),
    xcom.c.task_id == _b("task_id"),
    xcom.c.map_index == _b("map_index"),
)
PUSHED_HEADS = Statement(
    "What a task instance pushed, by key: each value's size and first ``b_head`` characters.",
    select(xcom.c.key, func.length(xcom.c.value), func.substr(xcom.c.value, 1, _HEAD))
    .where(_INSTANCE)
    .order_by(xcom.c.key),
)
RETURN_VALUE = Statement(
    "A task instance's whole return value (JSON text).",
    select(ti.c.return_value).where(ti.c.id == _b("ti_id")),
)
PUSHED_VALUE = Statement(
    "What a task instance pushed under one key, whole (JSON text).",
    select(xcom.c.value).where(_INSTANCE, xcom.c.key == _b("key")),
)


def instance_values(
    conn: Connection, ti_id: int, run_pk: int, task_id: str, map_index: int, head: int
) -> list[StoredValue]:
    """A task instance's return value (first, if it has one) and what it pushed, each cut
    to its first ``head`` characters: a page never reads a huge value whole."""
    found = [
        StoredValue(RETURN_KEY, size, text)
        for size, text in sql.tuples(conn, RETURN_VALUE_HEAD, {"b_ti_id": ti_id, "b_head": head})
    ]
    where = {"b_run_pk": run_pk, "b_task_id": task_id, "b_map_index": map_index, "b_head": head}
    found += [StoredValue(*row) for row in sql.tuples(conn, PUSHED_HEADS, where)]
    return found


def instance_value(
    conn: Connection, ti_id: int, run_pk: int, task_id: str, map_index: int, key: str
) -> str | None:
    """The whole JSON text a task instance left under ``key`` (its return value for
    ``RETURN_KEY``, else what it pushed); None when it left nothing there."""
    if key == RETURN_KEY:
        return sql.scalar(conn, RETURN_VALUE, {"b_ti_id": ti_id})
    where = {"b_run_pk": run_pk, "b_task_id": task_id, "b_map_index": map_index, "b_key": key}
    return sql.scalar(conn, PUSHED_VALUE, where)


name_all(globals(), prefix="xcoms.")

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
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, and_, delete, insert, select

from dagrun.store import run_reads, sql
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


name_all(globals(), prefix="xcoms.")

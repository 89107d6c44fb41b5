"""The statements of ``xcoms`` (see ``queries``)."""

from __future__ import annotations

from sqlalchemy import Integer, and_, delete, func, insert, select

from dagrun.store.schema import task_instance as ti
from dagrun.store.schema import xcom
from dagrun.store.sql import Statement, binds, name_all
from dagrun.store.sql import bind as _b
from dagrun.store.sql import bind_list as _many

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


PULL_ANY_PUSHED = Statement(
    "What some tasks of a run pushed under any key, newest last (Airflow 2's key=None).",
    select(xcom.c.task_id, xcom.c.map_index, xcom.c.value)
    .where(xcom.c.run_pk == _b("run_pk"), xcom.c.task_id.in_(_many("task_ids")))
    .order_by(xcom.c.created_at, xcom.c.key),
)


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


name_all(globals(), prefix="xcoms.")

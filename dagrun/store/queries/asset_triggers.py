"""The statements of ``asset_triggers`` (see ``queries``)."""

from __future__ import annotations

from sqlalchemy import Integer, cast, func, insert, select, text, update

from dagrun.store.schema import asset_cursor, asset_event, asset_trigger
from dagrun.store.sql import Statement, insert_new, name_all
from dagrun.store.sql import bind as _b
from dagrun.store.sql import bind_list as _many

START_CURSOR = Statement(
    "Start a condition-scheduled DAG's cursor at the latest event, unless it has one "
    "(events from before the DAG existed trigger nothing).",
    insert_new(
        asset_cursor,
        ("dag_id",),
        last_event_id=select(func.coalesce(func.max(asset_event.c.id), 0)).scalar_subquery(),
    ),
)


ADVANCE_CURSOR = Statement(
    "Move a DAG's cursor past the events its new run consumed, from the value they were "
    "read after (no row: another scheduler consumed them first).",
    update(asset_cursor)
    .where(asset_cursor.c.dag_id == _b("dag_id"), asset_cursor.c.last_event_id == _b("after"))
    .values(last_event_id=_b("upto")),
)


RECORD_TRIGGERS = Statement(
    "Record the events an asset-triggered run was made from: every event of the "
    "condition's assets after the cursor, up to the last one read.",
    insert(asset_trigger).from_select(
        ["run_pk", "event_id"],
        select(cast(_b("run_pk", type_=Integer), Integer), asset_event.c.id).where(
            asset_event.c.asset.in_(_many("assets")),
            asset_event.c.id > _b("after"),
            asset_event.c.id <= _b("upto"),
        ),
    ),
)


#: PostgreSQL only (``settled``): wait for the transactions writing events to end, briefly.
BOUND_THE_WAIT = Statement(
    "Give up a lock wait of this transaction after half a second (below the deadlock check).",
    text("SET LOCAL lock_timeout = '500ms'"),
)


WAIT_FOR_EVENT_WRITERS = Statement(
    "Wait until every transaction writing asset events has ended (they hold ROW EXCLUSIVE; "
    "SHARE waits for them and holds new ones back until this short transaction ends).",
    text("LOCK TABLE asset_event IN SHARE MODE"),
)


name_all(globals(), prefix="asset_triggers.")

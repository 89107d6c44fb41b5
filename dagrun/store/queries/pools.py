"""The statements of ``pools`` (see ``queries``)."""

from __future__ import annotations

from sqlalchemy import delete

from dagrun.store.schema import pool
from dagrun.store.sql import Statement, name_all, upsert
from dagrun.store.sql import bind as _b

UPSERT_POOL = Statement(
    "Create a pool or change its slots and description.",
    upsert(pool, "name", ("slots", "description")),
)


DELETE_POOL = Statement(
    "Delete a pool (its tasks then wait until it exists again).",
    delete(pool).where(pool.c.name == _b("name")),
)


name_all(globals(), prefix="pools.")

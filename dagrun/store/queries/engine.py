"""The statements of ``engine``: its transactions' beginnings and the database's clock and
schema version."""

from __future__ import annotations

from sqlalchemy import func, insert, select, text

from dagrun.store.schema import meta
from dagrun.store.sql import Statement, bind, name_all

BEGIN_WRITE = Statement("A writer's transaction: the write lock at once.", text("BEGIN IMMEDIATE"))
BEGIN_READ = Statement("A reader's transaction.", text("BEGIN"))
SERVER_NOW = Statement("The database server's clock.", select(func.now()))
SCHEMA_VERSION = Statement(
    "The schema's version.", select(meta.c.value).where(meta.c.key == "schema_version")
)
INSERT_SCHEMA_VERSION = Statement(
    "Record a new schema's version.",
    insert(meta).values(key="schema_version", value=bind("value")),
)
name_all(globals(), prefix="engine.")

"""The statements of ``connections`` (see ``queries``)."""

from __future__ import annotations

from sqlalchemy import delete, select

from dagrun.store.schema import connection
from dagrun.store.sql import Statement, name_all, upsert
from dagrun.store.sql import bind as _b

_CONNECTION = connection.c[
    "conn_id", "conn_type", "host", "port", "login", "password", "schema", "extra", "description"
]


CONNECTION = Statement(
    "A stored connection, every field of it.",
    select(*_CONNECTION).where(connection.c.conn_id == _b("conn_id")),
)


CONNECTIONS = Statement(
    "Every stored connection, by id.",
    select(*_CONNECTION).order_by(connection.c.conn_id),
)


UPSERT_CONNECTION = Statement(
    "Create a connection or replace it whole; one added without a description keeps its own.",
    upsert(
        connection,
        "conn_id",
        ("conn_type", "host", "port", "login", "password", "schema", "extra", "updated_at"),
        kept_if_null=("description",),
    ),
)


DELETE_CONNECTION = Statement(
    "Delete a connection (a task reading it then fails naming it).",
    delete(connection).where(connection.c.conn_id == _b("conn_id")),
)


name_all(globals(), prefix="connections.")

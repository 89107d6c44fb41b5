"""Connections in the store: read, add (or replace), list, delete.

A connection's ``extra`` is stored as JSON text and read back as a dict. The user's API
(``dagrun.runtime.connections``) puts the environment's ``DAGRUN_CONN_<ID>`` URIs on top.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from dagrun.store import sql

if TYPE_CHECKING:
    from sqlalchemy import Connection as SqlConnection

#: The statements of this module (``queries/connections.py``).
Q = sql.Catalogue("dagrun.store.queries.connections", "connections.")

# ---------------------------------------------------------------- statements


#: A stored connection's fields, by the names ``Connection`` takes them.
ConnectionRow = dict[str, Any]


class ConnectionFields(Protocol):
    """What ``set_connection`` reads of a connection (the runtime's frozen ``Connection``)."""

    @property
    def conn_id(self) -> str: ...
    @property
    def conn_type(self) -> str: ...
    @property
    def host(self) -> str | None: ...
    @property
    def port(self) -> int | None: ...
    @property
    def login(self) -> str | None: ...
    @property
    def password(self) -> str | None: ...
    @property
    def schema(self) -> str | None: ...
    @property
    def extra(self) -> dict[str, Any]: ...


def get_connection(conn: SqlConnection, conn_id: str) -> ConnectionRow | None:
    """The stored connection ``conn_id``, None when there is none."""
    row = sql.first(conn, Q.CONNECTION, {"b_conn_id": conn_id})
    return None if row is None else _connection(row)


def set_connection(
    conn: SqlConnection, connection: ConnectionFields, description: str | None, now: datetime
) -> None:
    """Store ``connection``, replacing one with its id (a description of None keeps the
    one it had)."""
    sql.execute(
        conn,
        Q.UPSERT_CONNECTION,
        {
            "b_conn_id": connection.conn_id,
            "b_conn_type": connection.conn_type,
            "b_host": connection.host,
            "b_port": connection.port,
            "b_login": connection.login,
            "b_password": connection.password,
            "b_schema": connection.schema,
            "b_extra": json.dumps(connection.extra) if connection.extra else None,
            "b_description": description,
            "b_updated_at": now,
        },
    )


def list_connections(conn: SqlConnection) -> list[ConnectionRow]:
    return [_connection(row) for row in sql.rows(conn, Q.CONNECTIONS)]


def delete_connection(conn: SqlConnection, conn_id: str) -> bool:
    """Delete ``conn_id``; whether there was one."""
    return sql.execute(conn, Q.DELETE_CONNECTION, {"b_conn_id": conn_id}).rowcount > 0


def _connection(row) -> ConnectionRow:
    return {
        "conn_id": row.conn_id,
        "conn_type": row.conn_type,
        "host": row.host,
        "port": row.port,
        "login": row.login,
        "password": row.password,
        "schema": row.schema,
        "extra": json.loads(row.extra) if row.extra else {},
        "description": row.description,
    }

"""Variables in the store: read, set, list, delete; and the stored secrets masking hides.

The user's API (``dagrun.runtime.variables``) puts the environment's overrides on top; the CLI
audits each change in the transaction that makes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection

from dagrun.store import sql
from dagrun.store import statements as q


@dataclass(frozen=True)
class VariableRow:
    key: str
    value: str
    description: str | None
    updated_at: datetime


def get_variable(conn: Connection, key: str) -> str | None:
    """The stored value of ``key``, None when there is none."""
    return sql.scalar(conn, q.VARIABLE, {"b_key": key})


def set_variable(
    conn: Connection, key: str, value: str, description: str | None, now: datetime
) -> None:
    """Create or change a variable (a description of None keeps the one it had)."""
    sql.execute(
        conn,
        q.UPSERT_VARIABLE,
        {"b_key": key, "b_value": value, "b_description": description, "b_updated_at": now},
    )


def list_variables(conn: Connection) -> list[VariableRow]:
    return [VariableRow(*row) for row in sql.tuples(conn, q.VARIABLES)]


def delete_variable(conn: Connection, key: str) -> bool:
    """Delete ``key``; whether there was one."""
    return sql.execute(conn, q.DELETE_VARIABLE, {"b_key": key}).rowcount > 0


def stored_secrets(conn: Connection) -> list[str]:
    """Every stored value that is a secret: sensitive variables' values and connection
    passwords together, in one query, as a worker child reads them every few seconds."""
    return sql.scalars(conn, q.STORED_SECRETS)

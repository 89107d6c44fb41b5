"""Variables in the store: read, set, list, delete; and the stored secrets masking hides.

The user's API (``dagrun.runtime.variables``) puts the environment's overrides on top; the CLI
audits each change in the transaction that makes it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from dagrun.store import sql
from dagrun.store.sensitive import extra_secrets

if TYPE_CHECKING:
    from sqlalchemy import Connection


#: The statements of this module (``queries/variables.py``).
Q = sql.Catalogue("dagrun.store.queries.variables", "variables.")

# ---------------------------------------------------------------- statements


@dataclass(frozen=True)
class VariableRow:
    """A variable as listed."""

    key: str
    value: str
    description: str | None
    updated_at: datetime


def get_variable(conn: Connection, key: str) -> str | None:
    """The stored value of ``key``, None when there is none."""
    return sql.scalar(conn, Q.VARIABLE, {"b_key": key})


def set_variable(
    conn: Connection, key: str, value: str, description: str | None, now: datetime
) -> None:
    """Create or change a variable (a description of None keeps the one it had)."""
    sql.execute(
        conn,
        Q.UPSERT_VARIABLE,
        {"b_key": key, "b_value": value, "b_description": description, "b_updated_at": now},
    )


def list_variables(conn: Connection) -> list[VariableRow]:
    return [VariableRow(*row) for row in sql.tuples(conn, Q.VARIABLES)]


def delete_variable(conn: Connection, key: str) -> bool:
    """Delete ``key``; whether there was one."""
    return sql.execute(conn, Q.DELETE_VARIABLE, {"b_key": key}).rowcount > 0


def stored_secrets(conn: Connection) -> list[str]:
    """Every stored value that is a secret: sensitive variables' values, connection
    passwords and the sensitive fields of connection extras together, in one query, as a
    worker child reads them every few seconds."""
    found: list[str] = []
    for is_extra, value in sql.tuples(conn, Q.STORED_SECRETS):
        found.extend(extra_secrets(_decoded(value)) if is_extra else [value])
    return found


def _decoded(extra: str) -> object:
    """A stored extra's JSON; None for text that is not JSON (it holds no known field)."""
    try:
        return json.loads(extra)
    except ValueError:
        return None

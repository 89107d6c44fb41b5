"""Variables in the store: read, set, list, delete; and the stored secrets masking hides.

The user's API (``dagrun.runtime.variables``) puts the environment's overrides on top; the CLI
audits each change in the transaction that makes it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, delete, func, literal, or_, select, union_all

from dagrun.store import sql
from dagrun.store.schema import connection, variable
from dagrun.store.sensitive import SENSITIVE_WORDS, extra_secrets
from dagrun.store.sql import Statement, name_all, upsert
from dagrun.store.sql import bind as _b

# ---------------------------------------------------------------- statements

VARIABLE = Statement(
    "A variable's stored value.",
    select(variable.c.value).where(variable.c.key == _b("key")),
)
VARIABLES = Statement(
    "Every stored variable, by key.",
    select(*variable.c["key", "value", "description", "updated_at"]).order_by(variable.c.key),
)
UPSERT_VARIABLE = Statement(
    "Create a variable or change its value; one set without a description keeps its own.",
    upsert(variable, "key", ("value", "updated_at"), kept_if_null=("description",)),
)
DELETE_VARIABLE = Statement(
    "Delete a variable (a task reading it then gets its default, or fails naming it).",
    delete(variable).where(variable.c.key == _b("key")),
)
STORED_SECRETS = Statement(
    "What masking hides that the store holds, in one query: the value of every variable "
    "whose key names a secret (in any case, as ``sensitive.is_sensitive`` judges), every "
    "connection password, and every connection extra (its sensitive fields are picked "
    "out of the JSON by ``stored_secrets``).",
    union_all(
        select(literal(False), variable.c.value).where(
            or_(
                *(
                    func.lower(variable.c.key).contains(word, autoescape=True)
                    for word in SENSITIVE_WORDS
                )
            )
        ),
        select(literal(False), connection.c.password).where(connection.c.password.is_not(None)),
        select(literal(True), connection.c.extra).where(connection.c.extra.is_not(None)),
    ),
)

name_all(globals(), prefix="variables.")


@dataclass(frozen=True)
class VariableRow:
    key: str
    value: str
    description: str | None
    updated_at: datetime


def get_variable(conn: Connection, key: str) -> str | None:
    """The stored value of ``key``, None when there is none."""
    return sql.scalar(conn, VARIABLE, {"b_key": key})


def set_variable(
    conn: Connection, key: str, value: str, description: str | None, now: datetime
) -> None:
    """Create or change a variable (a description of None keeps the one it had)."""
    sql.execute(
        conn,
        UPSERT_VARIABLE,
        {"b_key": key, "b_value": value, "b_description": description, "b_updated_at": now},
    )


def list_variables(conn: Connection) -> list[VariableRow]:
    return [VariableRow(*row) for row in sql.tuples(conn, VARIABLES)]


def delete_variable(conn: Connection, key: str) -> bool:
    """Delete ``key``; whether there was one."""
    return sql.execute(conn, DELETE_VARIABLE, {"b_key": key}).rowcount > 0


def stored_secrets(conn: Connection) -> list[str]:
    """Every stored value that is a secret: sensitive variables' values, connection
    passwords and the sensitive fields of connection extras together, in one query, as a
    worker child reads them every few seconds."""
    found: list[str] = []
    for is_extra, value in sql.tuples(conn, STORED_SECRETS):
        found.extend(extra_secrets(_decoded(value)) if is_extra else [value])
    return found


def _decoded(extra: str) -> object:
    """A stored extra's JSON; None for text that is not JSON (it holds no known field)."""
    try:
        return json.loads(extra)
    except ValueError:
        return None

"""The statements of ``variables`` (see ``queries``)."""

from __future__ import annotations

from sqlalchemy import delete, func, literal, or_, select, union_all

from dagrun.store.schema import connection, variable
from dagrun.store.sensitive import SENSITIVE_WORDS
from dagrun.store.sql import Statement, name_all, upsert
from dagrun.store.sql import bind as _b

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

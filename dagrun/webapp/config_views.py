"""Variables, connections and pools as their pages show them, secrets hidden as logs hide them.

The rule is the logs' (``dagrun.store.sensitive``): a variable whose key names a secret
shows ``***``, so does a connection's password (always) and every field of its ``extra``
under a sensitive key; and every secret the store holds (``variables.stored_secrets``) is
replaced wherever else it appears, as in a log, say a password written into a host or a
description. The environment's ``DAGRUN_VAR_*`` and ``DAGRUN_CONN_*`` are the processes'
that have them, not the page's: it shows what the store holds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dagrun.store import Store, dag_reads
from dagrun.store import connections as conn_store
from dagrun.store import variables as var_store
from dagrun.store.dag_reads import PoolRow
from dagrun.store.sensitive import REPLACEMENT, Hider, is_sensitive, masked_extra

#: A longer variable value is shown cut, with the command that prints it whole.
VALUE_CHARS = 4096


@dataclass(frozen=True)
class VariableShown:
    """A variable as its page shows it: ``masked`` when its key names a secret; ``size`` is
    the length of its whole value, of which ``value`` is at most ``VALUE_CHARS``."""

    key: str
    value: str
    size: int
    masked: bool
    description: str | None
    updated_at: datetime

    @property
    def cut(self) -> bool:
        return len(self.value) < self.size


@dataclass(frozen=True)
class ConnectionShown:
    """A connection as its page shows it: the password ``***`` when it has one, the extra as
    indented JSON with its sensitive fields ``***``."""

    conn_id: str
    conn_type: str
    host: str | None
    port: int | None
    login: str | None
    password: str | None
    schema: str | None
    extra: str | None
    description: str | None


def read_variables(store: Store) -> list[VariableShown]:
    with store.read() as conn:
        rows = var_store.list_variables(conn)
        hide = Hider(var_store.stored_secrets(conn))
    return [_variable(row, hide) for row in rows]


def _variable(row: var_store.VariableRow, hide: Hider) -> VariableShown:
    masked = is_sensitive(row.key)
    value = REPLACEMENT if masked else hide(row.value[:VALUE_CHARS])
    size = len(REPLACEMENT) if masked else len(row.value)
    return VariableShown(
        row.key, value, size, masked, _maybe(hide, row.description), row.updated_at
    )


def read_connections(store: Store) -> list[ConnectionShown]:
    with store.read() as conn:
        rows = conn_store.list_connections(conn)
        hide = Hider(var_store.stored_secrets(conn))
    return [_connection(row, hide) for row in rows]


def _connection(row: dict[str, Any], hide: Hider) -> ConnectionShown:
    extra = hide.in_json(masked_extra(row["extra"])) if row["extra"] else None
    return ConnectionShown(
        conn_id=row["conn_id"],
        conn_type=row["conn_type"],
        host=_maybe(hide, row["host"]),
        port=row["port"],
        login=_maybe(hide, row["login"]),
        password=REPLACEMENT if row["password"] else None,
        schema=_maybe(hide, row["schema"]),
        extra=None if extra is None else json.dumps(extra, indent=2, ensure_ascii=False),
        description=_maybe(hide, row["description"]),
    )


def _maybe(hide: Hider, text: str | None) -> str | None:
    return None if text is None else hide(text)


def read_pools(store: Store) -> list[PoolRow]:
    """Every pool with its running and queued tasks, and the pools tasks name that nobody
    created (their tasks wait)."""
    with store.read() as conn:
        return dag_reads.pool_rows(conn)

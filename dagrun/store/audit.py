"""The audit log: who did what to which DAG and run, and when.

Every hand change and every trigger is written here in the same transaction as the change
itself, so the log never claims an action that rolled back nor misses one that committed:
trigger, cancel, mark_run, mark_task, clear, backfill, pause/unpause, pools, variables and
connections. ``dagrun audit`` and the web page read it newest first.
"""

from __future__ import annotations

import getpass
import json
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypedDict

from dagrun.store import sql
from dagrun.store.engine import Store
from dagrun.timing.instants import Instant, iso

if TYPE_CHECKING:
    from sqlalchemy import Connection


#: The statements of this module (``queries/audit.py``).
Q = sql.Catalogue("dagrun.store.queries.audit", "audit.")

# ---------------------------------------------------------------- statements


def record(
    store: Store,
    conn: Connection,
    action: str,
    dag_id: str | None,
    run_id: str | None = None,
    **detail: object,
) -> None:
    """Record an operator action in the caller's transaction, with the OS user and host."""
    _insert(store, conn, action, dag_id, run_id, actor(), detail)


def record_visit(store: Store, conn: Connection, action: str, who: str, **detail: object) -> None:
    """Record what a visitor of the web page did (log in, fail to, log out) in the caller's
    transaction: ``who`` is the account and the client's address, not this process's user."""
    _insert(store, conn, action, None, None, who, detail)


def _insert(
    store: Store,
    conn: Connection,
    action: str,
    dag_id: str | None,
    run_id: str | None,
    who: str,
    detail: dict[str, object],
) -> None:
    sql.execute(
        conn,
        Q.INSERT_AUDIT,
        {
            "b_at": store.now(conn),
            "b_action": action,
            "b_dag_id": dag_id,
            "b_run_id": run_id,
            "b_actor": who,
            "b_detail": json.dumps(detail, default=_plain, sort_keys=True),
        },
    )


def _plain(value: object) -> str:
    """JSON for what ``json`` cannot write: instants in ISO 8601, anything else as text."""
    return value.isoformat() if isinstance(value, datetime) else str(value)


def actor() -> str:
    """``user@host`` of this process."""
    try:
        user = getpass.getuser()
    except Exception:  # no passwd entry, no LOGNAME: still record the action
        user = "unknown"
    import socket  # an action recorded, not every command

    return f"{user}@{socket.gethostname()}"


class AuditEntryJson(TypedDict):
    """An audit entry as ``dagrun audit --json`` and ``/api/audit`` write it."""

    at: Instant
    actor: str | None
    action: str
    dag_id: str | None
    run_id: str | None
    detail: dict[str, Any]


@dataclass(frozen=True)
class Entry:
    """One operator action of the audit log."""

    at: datetime
    actor: str | None
    action: str
    dag_id: str | None
    run_id: str | None
    detail: dict

    def to_json(self) -> AuditEntryJson:
        return {
            "at": iso(self.at),
            "actor": self.actor,
            "action": self.action,
            "dag_id": self.dag_id,
            "run_id": self.run_id,
            "detail": self.detail,
        }


def entries(conn: Connection, dag_id: str | None = None, limit: int = 100) -> list[Entry]:
    """The newest ``limit`` entries, newest first; of one DAG when ``dag_id`` is given."""
    if dag_id is None:
        rows = sql.tuples(conn, Q.NEWEST_ENTRIES, {"b_limit": limit})
    else:
        rows = sql.tuples(conn, Q.NEWEST_DAG_ENTRIES, {"b_dag_id": dag_id, "b_limit": limit})
    return [
        Entry(at, actor, action, dag, run, json.loads(detail) if detail else {})
        for at, actor, action, dag, run, detail in rows
    ]

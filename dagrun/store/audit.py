"""The audit log: who did what to which DAG and run, and when.

Every hand change and every trigger is written here in the same transaction as the change
itself, so the log never claims an action that rolled back nor misses one that committed:
trigger, cancel, mark_run, mark_task, clear, backfill, pause/unpause, pools, variables and
connections. ``dagrun audit`` and the web page read it newest first.
"""

from __future__ import annotations

import getpass
import json
import socket
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, bindparam, select

from dagrun.store import sql
from dagrun.store import statements as q
from dagrun.store.engine import Store
from dagrun.store.schema import audit_log


def record(
    store: Store,
    conn: Connection,
    action: str,
    dag_id: str | None,
    run_id: str | None = None,
    **detail: object,
) -> None:
    """Record an operator action in the caller's transaction, with the OS user and host."""
    sql.execute(
        conn,
        q.INSERT_AUDIT,
        {
            "b_at": store.now(conn),
            "b_action": action,
            "b_dag_id": dag_id,
            "b_run_id": run_id,
            "b_actor": actor(),
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
    return f"{user}@{socket.gethostname()}"


@dataclass(frozen=True)
class Entry:
    at: datetime
    actor: str | None
    action: str
    dag_id: str | None
    run_id: str | None
    detail: dict

    def to_json(self) -> dict:
        return {
            "at": self.at.isoformat(),
            "actor": self.actor,
            "action": self.action,
            "dag_id": self.dag_id,
            "run_id": self.run_id,
            "detail": self.detail,
        }


_ENTRIES = select(*audit_log.c["at", "actor", "action", "dag_id", "run_id", "detail"])


def entries(conn: Connection, dag_id: str | None = None, limit: int = 100) -> list[Entry]:
    """The newest ``limit`` entries, newest first; of one DAG when ``dag_id`` is given."""
    stmt = _ENTRIES
    if dag_id is not None:
        stmt = stmt.where(audit_log.c.dag_id == bindparam("b_dag_id"))
    stmt = stmt.order_by(audit_log.c.at.desc(), audit_log.c.id.desc()).limit(limit)
    rows = sql.tuples(conn, stmt, {"b_dag_id": dag_id} if dag_id is not None else {})
    return [
        Entry(at, actor, action, dag, run, json.loads(detail) if detail else {})
        for at, actor, action, dag, run, detail in rows
    ]

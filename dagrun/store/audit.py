"""The audit log: who did what to which DAG, and when (clear, backfill, pause, pools...)."""

from __future__ import annotations

import getpass
import json
import socket

from sqlalchemy import Connection

from dagrun.store import sql
from dagrun.store import statements as q
from dagrun.store.engine import Store


def record(
    store: Store, conn: Connection, action: str, dag_id: str | None, **detail: object
) -> None:
    """Record an operator action in the caller's transaction, with the OS user and host."""
    sql.execute(
        conn,
        q.INSERT_AUDIT,
        {
            "b_at": store.now(conn),
            "b_action": action,
            "b_dag_id": dag_id,
            "b_actor": actor(),
            "b_detail": json.dumps(detail, default=str, sort_keys=True),
        },
    )


def actor() -> str:
    """``user@host`` of this process."""
    try:
        user = getpass.getuser()
    except Exception:  # no passwd entry, no LOGNAME: still record the action
        user = "unknown"
    return f"{user}@{socket.gethostname()}"

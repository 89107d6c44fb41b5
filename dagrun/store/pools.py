"""Pools: named caps on how many task instances naming them run at once, on all workers.

A pool's free slots are counted under its row lock, so two workers claiming at once never
overfill it. A pool that queued tasks name but nobody created holds them back (listed by
``dagrun pools list`` and warned about by the scheduler) rather than letting them run
without a limit. Listing pools is a read (``reads.pool_rows``).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from dagrun.store import sql
from dagrun.store import statements as q


def claim_pooled(
    conn: Connection, room: int, params: dict[str, Any], *, scoped: bool = False
) -> list:
    """Claim queued task instances of pools with free slots, at most ``room`` in all (of the
    runs ``b_run_pks`` only when ``scoped``); the claimed rows (as
    ``statements.CLAIM_IN_POOL`` returns them)."""
    statement = q.CLAIM_IN_POOL_IN_RUNS if scoped else q.CLAIM_IN_POOL
    rows: list = []
    for name in sql.scalars(conn, q.QUEUED_POOLS):
        slots = sql.scalar(conn, q.LOCK_POOL, {"b_pool": name})
        if slots is None:
            continue
        free = slots - sql.scalar(conn, q.RUNNING_IN_POOL, {"b_pool": name})
        take = min(free, room - len(rows))
        if take > 0:
            rows += sql.rows(conn, statement, {**params, "b_limit": take, "b_pool": name})
        if len(rows) >= room:
            break
    return rows


def missing_pools(conn: Connection) -> list[str]:
    """Pools that queued tasks name but nobody created (``dagrun pools set``)."""
    return sql.scalars(conn, q.MISSING_POOLS)


def set_pool(conn: Connection, name: str, slots: int, description: str | None) -> None:
    """Create or resize a pool: at most ``slots`` of its tasks run at once, on all workers."""
    sql.execute(
        conn, q.UPSERT_POOL, {"b_name": name, "b_slots": slots, "b_description": description}
    )


def delete_pool(conn: Connection, name: str) -> bool:
    return sql.execute(conn, q.DELETE_POOL, {"b_name": name}).rowcount > 0

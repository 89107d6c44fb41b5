"""Pools and DAG caps: how many task instances naming a pool, or of a DAG with
``max_active_tasks``, run at once on all workers.

A pool's free slots are counted under its row lock, so two workers claiming at once never
overfill it; a DAG's cap is counted the same way under its ``dag_cap`` row, a row only
claims lock. A pool that queued tasks name but nobody created holds them back (listed by
``dagrun pools list`` and warned about by the scheduler) rather than letting them run
without a limit. Listing pools is a read (``dag_reads.pool_rows``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dagrun.store import dag_reads, sql
from dagrun.store.catalogue import TRANSITIONS as q

if TYPE_CHECKING:
    from sqlalchemy import Connection


#: The statements of this module (``queries/pools.py``).
Q = sql.Catalogue("dagrun.store.queries.pools", "pools.")

# ---------------------------------------------------------------- statements


#: The claim of a DAG's capped tasks for (in a pool, of some runs only).
_CAPPED_CLAIMS = {
    (False, False): q.CLAIM_CAPPED,
    (True, False): q.CLAIM_CAPPED_IN_POOL,
    (False, True): q.CLAIM_CAPPED_IN_RUNS,
    (True, True): q.CLAIM_CAPPED_IN_POOL_IN_RUNS,
}


def claim_capped(
    conn: Connection, room: int, params: dict[str, Any], *, scoped: bool = False
) -> list:
    """Claim queued task instances of DAGs with ``max_active_tasks``, at most ``room`` in
    all: per DAG (and pool) as many as both limits leave free, counted under the DAG's cap
    row lock (and the pool's), so two workers claiming at once never exceed either."""
    rows: list = []
    for dag_id, name in sql.tuples(conn, dag_reads.Q.QUEUED_CAPPED):
        free = _free_in_dag(conn, dag_id, room)
        if name is not None:
            free = min(free, _free_in_pool(conn, name))
        take = min(free, room - len(rows))
        if take > 0:
            statement = _CAPPED_CLAIMS[(name is not None, scoped)]
            where = {"b_limit": take, "b_dag_id": dag_id, "b_pool": name}
            rows += sql.rows(conn, statement, {**params, **where})
        if len(rows) >= room:
            break
    return rows


def _free_in_dag(conn: Connection, dag_id: str, room: int) -> int:
    cap = sql.scalar(conn, q.LOCK_DAG_CAP, {"b_dag_id": dag_id})
    if cap is None:  # the DAG dropped its cap: its capped tasks are no longer limited
        return room
    return cap - sql.scalar(conn, dag_reads.Q.RUNNING_IN_DAG, {"b_dag_id": dag_id})


def _free_in_pool(conn: Connection, name: str) -> int:
    """A pool's free slots, under its row lock (0 for a pool nobody created)."""
    slots = sql.scalar(conn, q.LOCK_POOL, {"b_pool": name})
    if slots is None:
        return 0
    return slots - sql.scalar(conn, dag_reads.Q.RUNNING_IN_POOL, {"b_pool": name})


def claim_pooled(
    conn: Connection, room: int, params: dict[str, Any], *, scoped: bool = False
) -> list:
    """Claim queued task instances of pools with free slots, at most ``room`` in all (of the
    runs ``b_run_pks`` only when ``scoped``); the claimed rows (as
    ``statements.CLAIM_IN_POOL`` returns them)."""
    statement = q.CLAIM_IN_POOL_IN_RUNS if scoped else q.CLAIM_IN_POOL
    rows: list = []
    for name in sql.scalars(conn, dag_reads.Q.QUEUED_POOLS):
        take = min(_free_in_pool(conn, name), room - len(rows))
        if take > 0:
            rows += sql.rows(conn, statement, {**params, "b_limit": take, "b_pool": name})
        if len(rows) >= room:
            break
    return rows


def missing_pools(conn: Connection) -> list[str]:
    """Pools that queued tasks name but nobody created (``dagrun pools set``)."""
    return sql.scalars(conn, dag_reads.Q.MISSING_POOLS)


def set_pool(conn: Connection, name: str, slots: int, description: str | None) -> None:
    """Create or resize a pool: at most ``slots`` of its tasks run at once, on all workers."""
    sql.execute(
        conn, Q.UPSERT_POOL, {"b_name": name, "b_slots": slots, "b_description": description}
    )


def delete_pool(conn: Connection, name: str) -> bool:
    return sql.execute(conn, Q.DELETE_POOL, {"b_name": name}).rowcount > 0

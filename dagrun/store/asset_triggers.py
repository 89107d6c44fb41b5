"""Asset-triggered runs of Airflow-style asset conditions (``Asset("a") & Asset("b")``).

Airflow's meaning (its scheduler's asset-triggered run creation, which ``trigger`` follows):
a DAG scheduled on a condition gets a run when the condition holds over the assets that
have a new event since the DAG's last asset-triggered run, whatever the events' partition
keys; the run consumes every new event of the condition's assets, so each event triggers
a DAG at most once. dagrun's partition-keyed meaning (``assets``) is not involved.

Each such DAG has a cursor (its ``asset_cursor`` row): the last event its last
asset-triggered run consumed. The registry starts it at the latest event when it first
records the DAG (``start_cursors``), so events from before the DAG existed trigger nothing,
as in Airflow, whose queue only holds events recorded for DAGs that existed then.

The run's logical date is when the newest event it consumes was recorded (Airflow 2 dates
an asset-triggered run at the time its triggering events were queued), moved on by a
microsecond while that instant is taken by another run of the DAG or is a time its own
timetable schedules, so the (dag_id, logical_date) key never sees two triggers collide; its
data interval is that instant (the logical date is the start of the data interval, DESIGN
section 3). Its run type is ``asset``. The events it consumed are kept (``asset_trigger``).

Two schedulers never make two runs of one set of events: the scheduler holds the DAG's row
lock, the cursor moves by a guarded update from the value the events were read after (zero
rows: ``StoreConflict``, the tick rolls back), and the logical date follows from the events,
so a second attempt would meet the first run's unique key. On PostgreSQL events may commit
out of id order; a cursor moved past an id still uncommitted would lose that event, so each
tick reads only up to a settled id (``settled``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from dagrun.authoring.assets import condition_holds
from dagrun.errors import StoreConflict
from dagrun.parsing.spec import DagSpec
from dagrun.states import RunType
from dagrun.store import dag_reads, run_reads, runs, sql
from dagrun.store.dag_reads import AssetEvent
from dagrun.timing.instants import TICK
from dagrun.timing.timetable import DataInterval

if TYPE_CHECKING:
    from sqlalchemy import Connection


#: The statements of this module (``queries/asset_triggers.py``).
Q = sql.Catalogue("dagrun.store.queries.asset_triggers", "asset_triggers.")

if TYPE_CHECKING:
    from dagrun.store.engine import Store

# ---------------------------------------------------------------- statements


#: No bound on event ids (the largest an INTEGER id holds): where transactions write one at
#: a time (SQLite), every id a write transaction reads is settled.
UNBOUNDED = 2**31 - 1


def start_cursors(conn: Connection, specs: Iterable[DagSpec]) -> None:
    """Give each DAG with an asset condition a cursor at the latest event, unless it has
    one (the registry calls this when it records DAGs)."""
    rows = [{"b_dag_id": s.dag_id} for s in specs if s.condition is not None]
    sql.execute_many(conn, Q.START_CURSOR, rows)


def settled(store: Store, previous: int = 0) -> int:
    """The id up to which every asset event has committed or never will. PostgreSQL hands
    out ids when rows are written, not when they commit: in one short transaction of its
    own, wait for the writers of events in flight, then read the latest id (ids written
    later are higher). SQLite has one writer at a time: every id is settled.

    A writer in flight may go on to wait for a lock another writer holds, who now queues
    behind this wait: a cycle. The wait gives up after half a second, before PostgreSQL's
    deadlock check (1 s) would abort one of the writers, and ``previous`` (the last settled
    id, settled for good) stands: events after it wait for a later tick."""
    if not store.caps.concurrent_writers:
        return UNBOUNDED
    try:
        with store.write() as conn:
            sql.execute(conn, Q.BOUND_THE_WAIT)
            sql.execute(conn, Q.WAIT_FOR_EVENT_WRITERS)
            return int(sql.scalar(conn, dag_reads.Q.LAST_ASSET_EVENT))
    except StoreConflict:
        return previous


@dataclass(frozen=True)
class Triggered:
    """An asset-triggered run just made: its key, logical date and what it consumed."""

    run_pk: int
    logical_date: datetime
    assets: tuple[str, ...]
    last_event_id: int


def trigger(conn: Connection, spec: DagSpec, now: datetime, upto: int) -> Triggered | None:
    """Under the DAG's lock: a run of ``spec`` if its condition holds over the assets with
    events after its cursor (up to the settled id ``upto``), consuming all of them."""
    assert spec.condition is not None  # the scheduler asks only for DAGs with one
    after = sql.scalar(conn, dag_reads.Q.ASSET_CURSOR, {"b_dag_id": spec.dag_id})
    if after is None:  # recorded before this version: it starts now
        start_cursors(conn, [spec])
        return None
    names = list(spec.condition_assets)
    params = {"b_assets": names, "b_after": after, "b_upto": upto}
    found = sql.tuples(conn, dag_reads.Q.NEW_EVENTS_BY_ASSET, params)
    present = {asset for asset, _, _ in found}
    if not present or not condition_holds(spec.condition, present):
        return None
    last = max(last_id for _, last_id, _ in found)
    logical = free_instant(conn, spec, max(at for _, _, at in found))
    if not runs.create_runs(conn, spec, [DataInterval(logical, logical)], RunType.ASSET, now):
        raise StoreConflict(f"{spec.dag_id}: an asset-triggered run at {logical} exists")
    run_pk = sql.first(conn, run_reads.Q.RUN_FOR_DATE, _at(spec, logical)).id
    sql.execute(conn, Q.RECORD_TRIGGERS, {"b_run_pk": run_pk, **params, "b_upto": last})
    moved = {"b_dag_id": spec.dag_id, "b_after": after, "b_upto": last}
    if sql.execute(conn, Q.ADVANCE_CURSOR, moved).rowcount != 1:
        raise StoreConflict(f"{spec.dag_id}: its asset events were consumed meanwhile")
    return Triggered(run_pk, logical, tuple(sorted(present)), last)


def free_instant(conn: Connection, spec: DagSpec, at: datetime) -> datetime:
    """``at``, or the first microsecond after it that no other run of the DAG holds and its
    timetable does not schedule (an AssetOrTimeSchedule's time runs keep their dates)."""
    instant = at
    timetable = spec.timetable
    while (
        sql.first(conn, run_reads.Q.RUN_FOR_DATE, _at(spec, instant)) is not None
        or next(iter(timetable.intervals(instant, instant)), None) is not None
    ):
        instant += TICK
    return instant


def _at(spec: DagSpec, instant: datetime) -> dict:
    return {"b_dag_id": spec.dag_id, "b_logical_date": instant}


# ---------------------------------------------------------------- what a run was made from


def triggering_events(conn: Connection, run_pk: int) -> dict[str, list[AssetEvent]]:
    """The events a run was made from, by asset, oldest first (Airflow's
    ``triggering_asset_events``); empty for a run no asset condition made."""
    found: dict[str, list[AssetEvent]] = {}
    for row in sql.tuples(conn, dag_reads.Q.TRIGGERING_EVENTS, {"b_run_pk": run_pk}):
        event = AssetEvent(*row)
        found.setdefault(event.asset, []).append(event)
    return found

"""Assets in the store: events written where tasks succeed, and the runs they call for.

A task with ``outlets`` that succeeds writes one event per asset for its run's partition
key (``ds``: the run's logical date in its DAG's time zone), in the transaction that records
the success (``attempts.complete``), with the content fingerprint of the partition the
attempt wrote of a dataset named like the asset (``dagrun.partition``), if it wrote one.

A DAG scheduled on assets gets one run per key, logical date the local midnight of that
day, once every asset it lists has an event for the key (``look``, called by the scheduler
under the DAG lock). Each DAG keeps a cursor over the events it has looked at and, per
asset and key, the event its run consumed. A newer event with the same fingerprint as the
consumed one changes nothing; a really changed partition re-runs the DAG's run for that key
(as ``clear`` would) once that run has finished, never a second run. The records of events,
of what was consumed and of the cursors are written by this module's own statements; the
reads are in ``dag_reads`` (events, cursors) and ``run_reads`` (the run of a key).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from typing import TYPE_CHECKING, TypedDict
from zoneinfo import ZoneInfo

from dagrun.parsing.spec import DagSpec
from dagrun.states import AttemptOutcome, RunState
from dagrun.store import dag_reads, run_reads, runs, sql
from dagrun.store.asset_triggers import UNBOUNDED
from dagrun.store.dag_reads import AssetEvent
from dagrun.timing.instants import Instant, iso
from dagrun.timing.timetable import DataInterval

if TYPE_CHECKING:
    from sqlalchemy import Connection


#: The statements of this module (``queries/assets.py``).
Q = sql.Catalogue("dagrun.store.queries.assets", "assets.")

if TYPE_CHECKING:
    from dagrun.store.attempts import Outcome
    from dagrun.store.runs import SpecLookup

# ---------------------------------------------------------------- statements


#: New events one look reads at most; the cursor takes the rest at the next tick.
EVENTS_PER_LOOK = 5000


def record_events(
    conn: Connection, accepted: Iterable[Outcome], spec_for: SpecLookup, now: datetime
) -> int:
    """Write an event per asset for each accepted success of a task with ``outlets``.
    A commit of DAGs without outlets costs one spec lookup per DAG and nothing more."""
    produced = [o for o in accepted if o.outcome == AttemptOutcome.SUCCESS]
    producing = {d for d in {o.dag_id for o in produced} if spec_for(d).has_outlets}
    produced = [
        o
        for o in produced
        if o.dag_id in producing and spec_for(o.dag_id).task_map[o.task_id].outlets
    ]
    if not produced:
        return 0
    facts = runs.run_facts(conn, {o.run_pk for o in produced})
    rows = []
    for o in produced:
        spec = spec_for(o.dag_id)
        key = partition_key(facts[o.run_pk].logical_date, spec.timezone)
        for asset in spec.task_map[o.task_id].outlets:
            rows.append(
                {
                    "b_asset": asset,
                    "b_partition_key": key,
                    "b_fingerprint": _fingerprint(conn, asset, key, o),
                    "b_dag_id": o.dag_id,
                    "b_run_pk": o.run_pk,
                    "b_task_id": o.task_id,
                    "b_created_at": now,
                }
            )
    return sql.execute_many(conn, Q.INSERT_ASSET_EVENTS, rows)


def partition_key(logical_date: datetime, timezone: str) -> str:
    """A run's partition key: its ``ds``, the logical date's day in the DAG's time zone."""
    return logical_date.astimezone(ZoneInfo(timezone)).strftime("%Y-%m-%d")


def _fingerprint(conn: Connection, asset: str, key: str, outcome: Outcome) -> str | None:
    """The sha256 of the partition of ``asset`` the attempt wrote for ``key``, if it did."""
    params = {
        "b_dataset": asset,
        "b_partition_key": key,
        "b_ti_id": outcome.ti_id,
        "b_fence": outcome.fence_token,
    }
    return sql.scalar(conn, dag_reads.Q.PARTITION_FINGERPRINT, params)


# ---------------------------------------------------------------- asset-scheduled DAGs


@dataclass(frozen=True)
class Due:
    """A partition key whose assets all have events: its run (if there is one, and its
    state), and the latest event of each asset for the key (what the run consumes)."""

    key: str
    interval: DataInterval
    run_pk: int | None
    run_state: RunState | None
    latest: dict[str, tuple[int, str | None]]


@dataclass
class Look:
    """What one look at the new events found: keys to run or re-run (``due``), keys whose
    new events need nothing done (``settled``: unchanged content, or a run that has not
    started and will read the new data), and where the cursor goes."""

    due: list[Due] = field(default_factory=list)
    settled: list[Due] = field(default_factory=list)
    cursor: int | None = None


def look(conn: Connection, spec: DagSpec, settled: int = UNBOUNDED) -> Look:
    """The keys whose assets all have events, with a change the DAG has not consumed.

    Keys whose run is still active are left for a later look (the cursor stops before
    their events); keys some asset has no event for yet wait for it (its event brings the
    key back). Events after ``settled`` (an id some event below may still commit under,
    see ``asset_triggers.settled``) wait for a later look."""
    found = Look()
    after = sql.scalar(conn, dag_reads.Q.ASSET_CURSOR, {"b_dag_id": spec.dag_id}) or 0
    params = {
        "b_assets": list(spec.assets),
        "b_after": after,
        "b_upto": settled,
        "b_limit": EVENTS_PER_LOOK,
    }
    events = sql.rows(conn, dag_reads.Q.NEW_ASSET_EVENTS, params)
    if not events:
        return found
    first: dict[str, int] = {}
    for e in events:
        first.setdefault(e.partition_key, e.id)
    held = []
    for key in first:
        due = _consider(conn, spec, key)
        if due is None:
            continue
        if due.run_state == RunState.RUNNING:
            held.append(first[key])  # re-run it, if need be, once it has ended
        elif _changed(conn, spec, due) and due.run_state not in _NOT_STARTED:
            found.due.append(due)
        else:
            found.settled.append(due)
    found.cursor = min(held) - 1 if held else events[-1].id
    return found


_NOT_STARTED = frozenset({RunState.WAITING, RunState.QUEUED})


def _consider(conn: Connection, spec: DagSpec, key: str) -> Due | None:
    """The key as a run to make or re-run when every asset has an event for it."""
    latest: dict[str, tuple[int, str | None]] = {}
    for event_id, asset, fingerprint in sql.tuples(
        conn, dag_reads.Q.KEY_EVENTS, {"b_assets": list(spec.assets), "b_key": key}
    ):
        latest[asset] = (event_id, fingerprint)
    if set(latest) != set(spec.assets):
        return None
    interval = key_interval(key, spec.timezone)
    params = {"b_dag_id": spec.dag_id, "b_logical_date": interval.start}
    run = sql.first(conn, run_reads.Q.RUN_FOR_DATE, params)
    if run is None:
        return Due(key, interval, None, None, latest)
    return Due(key, interval, run.id, RunState(run.state), latest)


def _changed(conn: Connection, spec: DagSpec, due: Due) -> bool:
    """Whether some asset's latest event for the key is newer than the one consumed, with
    other content (or no fingerprint to tell)."""
    consumed = {
        asset: (event_id, fingerprint)
        for asset, event_id, fingerprint in sql.tuples(
            conn, dag_reads.Q.CONSUMED_FOR_KEY, {"b_dag_id": spec.dag_id, "b_key": due.key}
        )
    }
    for asset, (event_id, fingerprint) in due.latest.items():
        seen = consumed.get(asset)
        if seen is None:
            return True
        if event_id > seen[0] and (fingerprint is None or fingerprint != seen[1]):
            return True
    return False


def key_interval(key: str, timezone: str) -> DataInterval:
    """The data interval of a key's run: its day, midnight to midnight, in the DAG's zone."""
    tz = ZoneInfo(timezone)
    day = date.fromisoformat(key)
    start = datetime.combine(day, time(), tz)
    end = datetime.combine(day + timedelta(days=1), time(), tz)
    return DataInterval(start.astimezone(ZoneInfo("UTC")), end.astimezone(ZoneInfo("UTC")))


def consume(conn: Connection, spec: DagSpec, due: Due, now: datetime) -> None:
    """Record the events a run of the key was made or re-run for (or found unchanged)."""
    rows = [
        {
            "b_dag_id": spec.dag_id,
            "b_asset": asset,
            "b_partition_key": due.key,
            "b_event_id": event_id,
            "b_fingerprint": fingerprint,
            "b_consumed_at": now,
        }
        for asset, (event_id, fingerprint) in sorted(due.latest.items())
    ]
    sql.execute_many(conn, Q.UPSERT_CONSUMED, rows)


def move_cursor(conn: Connection, spec: DagSpec, cursor: int) -> None:
    sql.execute(conn, Q.UPSERT_ASSET_CURSOR, {"b_dag_id": spec.dag_id, "b_last_event_id": cursor})


# ---------------------------------------------------------------- what an operator sees


class ConsumerJson(TypedDict):
    dag_id: str
    run_id: str | None
    latest_event: bool


class ProducedByJson(TypedDict):
    """The run and task that produced a partition key's latest event (None: since deleted)."""

    dag_id: str | None
    run_id: str | None
    task_id: str | None
    created_at: Instant


class PartitionJson(TypedDict):
    partition_key: str
    events: int
    fingerprint: str | None
    latest_event: ProducedByJson
    consumed_by: list[ConsumerJson]


class AssetJson(TypedDict):
    """An asset as ``dagrun assets list --json`` and ``/api/assets`` write it."""

    name: str
    producers: list[str]
    consumers: list[str]
    events: int
    latest_partition_key: str | None
    latest_event_at: Instant | None
    partitions: list[PartitionJson]


@dataclass(frozen=True)
class Consumer:
    """A run that consumed a partition key of an asset: the run an asset-scheduled DAG made
    or re-ran for the key, or a run an asset condition triggered. ``run_id`` is None when
    the run is gone (deleted, or its DAG is no longer known); ``latest`` says whether it
    consumed the key's latest event."""

    dag_id: str
    run_id: str | None
    latest: bool

    def to_json(self) -> ConsumerJson:
        return {"dag_id": self.dag_id, "run_id": self.run_id, "latest_event": self.latest}


@dataclass(frozen=True)
class Partition:
    """One partition key of an asset: how many events it has, the latest (its fingerprint
    and who produced it) and the runs that consumed the key."""

    key: str
    events: int
    latest: AssetEvent
    consumers: tuple[Consumer, ...] = ()

    def to_json(self) -> PartitionJson:
        return {
            "partition_key": self.key,
            "events": self.events,
            "fingerprint": self.latest.fingerprint,
            "latest_event": {
                "dag_id": self.latest.dag_id,
                "run_id": self.latest.run_id,
                "task_id": self.latest.task_id,
                "created_at": iso(self.latest.created_at),
            },
            "consumed_by": [c.to_json() for c in self.consumers],
        }


@dataclass(frozen=True)
class AssetRow:
    """An asset: who produces it (``dag.task``, and that task's DAG in ``producer_dags``),
    who is scheduled on it, and its partition keys in order."""

    name: str
    producers: tuple[str, ...]
    consumers: tuple[str, ...]
    partitions: tuple[Partition, ...] = ()
    producer_dags: tuple[str, ...] = ()

    @property
    def events(self) -> int:
        return sum(p.events for p in self.partitions)

    @property
    def latest_key(self) -> str | None:
        return self.partitions[-1].key if self.partitions else None

    @property
    def latest_at(self) -> datetime | None:
        return max((p.latest.created_at for p in self.partitions), default=None)

    def to_json(self) -> AssetJson:
        return {
            "name": self.name,
            "producers": list(self.producers),
            "consumers": list(self.consumers),
            "events": self.events,
            "latest_partition_key": self.latest_key,
            "latest_event_at": iso(self.latest_at),
            "partitions": [p.to_json() for p in self.partitions],
        }


def asset_rows(conn: Connection, specs: Iterable[DagSpec]) -> list[AssetRow]:
    """Every asset the DAGs name or events record, by name, with each partition key's latest
    event and consuming runs. An asset a DAG waits for that nothing has produced yet shows
    with no events (the DAG waits; it is not an error)."""
    specs = list(specs)
    producers: dict[str, list[str]] = {}
    producer_dags: dict[str, list[str]] = {}
    consumers: dict[str, list[str]] = {}
    for spec in specs:
        for task in spec.tasks:
            for name in task.outlets:
                producers.setdefault(name, []).append(f"{spec.dag_id}.{task.task_id}")
                producer_dags.setdefault(name, []).append(spec.dag_id)
        for name in (*spec.assets, *spec.condition_assets):
            consumers.setdefault(name, []).append(spec.dag_id)
    partitions = _partitions(conn, {s.dag_id: s.timezone for s in specs})
    return [
        AssetRow(
            name,
            tuple(producers.get(name, ())),
            tuple(consumers.get(name, ())),
            tuple(partitions.get(name, ())),
            tuple(producer_dags.get(name, ())),
        )
        for name in sorted({*producers, *consumers, *partitions})
    ]


#: A run that consumed a key, as read: its DAG, its run id (None: gone), the event it consumed.
_Taken = tuple[str, str | None, int]


def _partitions(conn: Connection, zones: dict[str, str]) -> dict[str, list[Partition]]:
    """Each asset's partition keys in order, with their consumers (``zones``: the time zone
    of each DAG known, which maps its keys to its runs)."""
    consumed = _consumed(conn, zones)
    found: dict[str, list[Partition]] = {}
    for *columns, events in sql.tuples(conn, dag_reads.Q.ASSET_PARTITIONS):
        latest = AssetEvent(*columns)
        taken = sorted(consumed.get((latest.asset, latest.partition_key), []), key=_by_run)
        runs = tuple(
            Consumer(dag_id, run_id, event == latest.id) for dag_id, run_id, event in taken
        )
        found.setdefault(latest.asset, []).append(
            Partition(latest.partition_key, events, latest, runs)
        )
    return found


def _by_run(taken: _Taken) -> tuple[str, str]:
    return taken[0], taken[1] or ""


def _consumed(conn: Connection, zones: dict[str, str]) -> dict[tuple[str, str], list[_Taken]]:
    """Per asset and key, each run that consumed it: the run of the key's day of an
    asset-scheduled DAG (the one ``look`` made or re-ran), and the runs asset conditions
    triggered with an event of the key."""
    keyed = sql.tuples(conn, dag_reads.Q.CONSUMED_KEYS)
    runs = _key_runs(conn, {dag_id for dag_id, *_ in keyed})
    found: dict[tuple[str, str], list[_Taken]] = {}
    for dag_id, asset, key, event_id in keyed:
        zone = zones.get(dag_id)
        run_id = runs.get((dag_id, key_interval(key, zone).start)) if zone else None
        found.setdefault((asset, key), []).append((dag_id, run_id, event_id))
    for asset, key, event_id, dag_id, run_id in sql.tuples(conn, dag_reads.Q.TRIGGERED_KEYS):
        found.setdefault((asset, key), []).append((dag_id, run_id, event_id))
    return found


def _key_runs(conn: Connection, dag_ids: set[str]) -> dict[tuple[str, datetime], str]:
    """The run id of each run of these DAGs a key can map to, by DAG and logical date."""
    if not dag_ids:
        return {}
    rows = sql.tuples(conn, run_reads.Q.RUNS_BY_DATE, {"b_dag_ids": sorted(dag_ids)})
    return {(dag_id, logical_date): run_id for dag_id, logical_date, run_id in rows}


def latest_events(conn: Connection, names: Iterable[str]) -> dict[str, AssetEvent]:
    """The latest event of each named asset that has one, by asset."""
    names = sorted(set(names))
    if not names:
        return {}
    found = sql.tuples(conn, dag_reads.Q.LATEST_ASSET_EVENTS, {"b_assets": names})
    return {row[1]: AssetEvent(*row) for row in found}


@dataclass(frozen=True)
class Awaited:
    """An asset a DAG is scheduled on, as that DAG sees it: the asset's latest event, the
    event of the same key the DAG's run consumed, and whether its cursor has passed the
    latest event (a key waiting for another asset's event is looked at, not consumed)."""

    name: str
    latest: AssetEvent | None
    consumed_event_id: int | None
    consumed_at: datetime | None
    looked_at: bool

    @property
    def status(self) -> str:
        """``no events``, ``consumed``, ``waiting for other assets`` (its key is not
        complete), or ``new`` (the scheduler has not looked at it yet)."""
        if self.latest is None:
            return "no events"
        if self.consumed_event_id is not None and self.consumed_event_id >= self.latest.id:
            return "consumed"
        return "waiting for other assets" if self.looked_at else "new"


def awaited(conn: Connection, spec: DagSpec) -> list[Awaited]:
    """The assets ``spec`` is scheduled on, in its order, with what it made of their latest
    events (the same cursor and consumed rows ``look`` and ``consume`` keep; for an asset
    condition, its cursor: an event after it waits for the condition to hold)."""
    cursor = sql.scalar(conn, dag_reads.Q.ASSET_CURSOR, {"b_dag_id": spec.dag_id}) or 0
    if spec.condition is not None:
        found = latest_events(conn, spec.condition_assets)
        return [
            Awaited(
                name,
                event := found.get(name),
                cursor if event is not None and event.id <= cursor else None,
                None,
                event is not None and event.id > cursor,
            )
            for name in spec.condition_assets
        ]
    latest = latest_events(conn, spec.assets)
    consumed = {}
    if latest:
        params = {
            "b_dag_id": spec.dag_id,
            "b_assets": sorted(latest),
            "b_keys": sorted({e.partition_key for e in latest.values()}),
        }
        for asset, key, event_id, at in sql.tuples(conn, dag_reads.Q.CONSUMED_OF_KEYS, params):
            if key == latest[asset].partition_key:
                consumed[asset] = (event_id, at)
    return [
        Awaited(
            name,
            latest.get(name),
            *consumed.get(name, (None, None)),
            name in latest and latest[name].id <= cursor,
        )
        for name in spec.assets
    ]

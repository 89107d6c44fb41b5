"""Reads of what the runs are made from: DAG files and their import errors, DAGs and their
specs, pools and DAG caps, and asset events.

The DAG sync compares files with ``known_files``; the scheduler, the CLI and the web page
read ``active_dags``, ``get_dag`` and ``load_spec``; claims count pools' and DAGs' running
tasks under the locks they take (``RUNNING_IN_POOL``, ``RUNNING_IN_DAG``); asset
scheduling reads events after each DAG's cursor (``NEW_ASSET_EVENTS``, and per asset
``NEW_EVENTS_BY_ASSET`` for a condition). Like every read,
these lock nothing (see ``statements`` on deciding under a lock).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, func, select

from dagrun.errors import DagNotFound
from dagrun.parsing.spec import DagSpec, FileWarning, spec_from
from dagrun.states import TaskState
from dagrun.store import sql
from dagrun.store.schema import (
    asset_consumed,
    asset_cursor,
    asset_event,
    asset_trigger,
    dag,
    dag_file,
    dag_run,
    in_state,
    meta,
    partition_write,
    pool,
)
from dagrun.store.schema import task_instance as ti
from dagrun.store.sql import Statement, name_all
from dagrun.store.sql import bind as _b
from dagrun.store.sql import bind_list as _many

# ---------------------------------------------------------------- DAG files and DAGs


@dataclass(frozen=True)
class KnownFile:
    path: str
    content_hash: str
    dag_ids: tuple[str, ...]
    error: str | None
    error_line: int | None
    depends_on: tuple[str, ...] = ()


@dataclass(frozen=True)
class DagRow:
    """A DAG as the registry holds it; ``error`` is its file's import error while the file
    fails (the DAG then runs as last parsed)."""

    dag_id: str
    fileloc: str
    is_paused: bool
    is_active: bool
    spec: DagSpec
    cursor: datetime | None
    error: str | None = None


_KNOWN_FILES = Statement(
    "Every DAG file parsed: its hash, its DAGs, its error and the helpers it imports.",
    select(*dag_file.c["path", "content_hash", "dag_ids", "error", "error_line", "depends_on"]),
)


def known_files(conn: Connection) -> dict[str, KnownFile]:
    rows = sql.rows(conn, _KNOWN_FILES)
    return {
        r.path: KnownFile(
            r.path,
            r.content_hash,
            tuple(json.loads(r.dag_ids)),
            r.error,
            r.error_line,
            tuple(json.loads(r.depends_on or "[]")),
        )
        for r in rows
    }


#: The ``dagrun_meta`` keys of the fingerprint of the code that parsed the files recorded,
#: and of the dags folder the store serves (the first one synced into it).
PARSED_BY_KEY = "parsed_by"
SERVED_FOLDER_KEY = "dags_folder"
_META_VALUE = Statement(
    "One ``dagrun_meta`` value by its key (none before it was kept).",
    select(meta.c.value).where(meta.c.key == _b("key")),
)


def parsed_by(conn: Connection) -> str | None:
    """Which code parsed the files recorded: files parsed by other code are parsed again
    (what a file makes, or why it fails, depends on dagrun's version as much as on it)."""
    return sql.scalar(conn, _META_VALUE, {"b_key": PARSED_BY_KEY})


def served_folder(conn: Connection) -> str | None:
    """The dags folder this store serves: commands run from elsewhere read it, never
    replace it (``dagrun db rebind-folder`` moves it). None until a first sync binds one."""
    return sql.scalar(conn, _META_VALUE, {"b_key": SERVED_FOLDER_KEY})


def import_errors(conn: Connection) -> list[KnownFile]:
    return [
        KnownFile(r.path, r.content_hash, (), r.error, r.error_line)
        for r in sql.rows(conn, _IMPORT_ERRORS)
    ]


_IMPORT_ERRORS = Statement(
    "The DAG files whose last parse failed, with the error, by path.",
    select(dag_file.c.path, dag_file.c.content_hash, dag_file.c.error, dag_file.c.error_line)
    .where(dag_file.c.error.is_not(None))
    .order_by(dag_file.c.path),
)


@dataclass(frozen=True)
class FileWarnings:
    """A DAG file's warnings from its last parse (``dags errors --warnings``)."""

    path: str
    warnings: tuple[FileWarning, ...]


_FILE_WARNINGS = Statement(
    "The DAG files whose last parse left warnings, with them, by path.",
    select(dag_file.c.path, dag_file.c.warnings)
    .where(dag_file.c.warnings.is_not(None), dag_file.c.warnings != "[]")
    .order_by(dag_file.c.path),
)


def file_warnings(conn: Connection) -> list[FileWarnings]:
    return [
        FileWarnings(r.path, tuple(FileWarning.from_json(w) for w in json.loads(r.warnings)))
        for r in sql.rows(conn, _FILE_WARNINGS)
    ]


_GOOD_SOURCE = Statement(
    "The source of a DAG file's last parse that succeeded.",
    select(dag_file.c.good_source).where(dag_file.c.path == _b("path")),
)


def good_source(conn: Connection, path: str) -> str | None:
    """The source of ``path``'s last parse that succeeded (what runs while the file fails)."""
    return sql.scalar(conn, _GOOD_SOURCE, {"b_path": path})


@dataclass(frozen=True)
class FileSource:
    """What the web page shows of a DAG file: the source its DAGs run from (that of its last
    parse that succeeded; None if the store kept none), and the error of its last parse."""

    path: str
    parsed_at: datetime
    source: str | None
    error: str | None
    error_line: int | None


_FILE_SOURCE = Statement(
    "A DAG file's last good source, when it was last parsed and that parse's error.",
    select(*dag_file.c["path", "parsed_at", "good_source", "error", "error_line"]).where(
        dag_file.c.path == _b("path")
    ),
)


def file_source(conn: Connection, path: str) -> FileSource | None:
    """The source and last parse of the file at ``path``; None for a file no longer known."""
    row = sql.first(conn, _FILE_SOURCE, {"b_path": path})
    return None if row is None else FileSource(*row)


_DAG_SELECT = select(
    *dag.c["dag_id", "fileloc", "is_paused", "is_active", "spec_hash", "spec"],
    dag.c.next_logical_date,
    dag_file.c.error,
).outerjoin(dag_file, dag_file.c.path == dag.c.fileloc)


def _dag_row(r) -> DagRow:
    spec = spec_from(r.spec_hash, r.spec)
    return DagRow(
        r.dag_id,
        r.fileloc,
        bool(r.is_paused),
        bool(r.is_active),
        spec,
        r.next_logical_date,
        r.error,
    )


def active_dags(conn: Connection) -> list[DagRow]:
    return [_dag_row(r) for r in sql.rows(conn, _ACTIVE_DAGS)]


_ACTIVE_DAGS = Statement(
    "The DAGs their files still define, by id.",
    _DAG_SELECT.where(dag.c.is_active.is_(True)).order_by(dag.c.dag_id),
)
_DAG = Statement("One DAG, active or not.", _DAG_SELECT.where(dag.c.dag_id == _b("dag_id")))

_ACTIVE_DAG = Statement(
    "One DAG that its file still defines.",
    _DAG_SELECT.where(dag.c.dag_id == _b("dag_id"), dag.c.is_active.is_(True)),
)


def get_dag(conn: Connection, dag_id: str, *, active: bool = True) -> DagRow:
    """One DAG; ``active=False`` also finds a DAG whose file no longer defines it (its runs
    outlive the file)."""
    row = sql.first(conn, _ACTIVE_DAG if active else _DAG, {"b_dag_id": dag_id})
    if row is None:
        raise DagNotFound(dag_id)
    return _dag_row(row)


_SPEC = Statement(
    "A DAG's stored spec and its hash.",
    select(dag.c.spec_hash, dag.c.spec).where(dag.c.dag_id == _b("dag_id")),
)


def load_spec(conn: Connection, dag_id: str) -> DagSpec:
    """The stored spec of a DAG, active or not (runs outlive the file that made them)."""
    row = sql.first(conn, _SPEC, {"b_dag_id": dag_id})
    if row is None:
        raise DagNotFound(dag_id)
    return spec_from(row.spec_hash, row.spec)


_ACTIVE_DAG_IDS = Statement(
    "The DAGs their files still define.", select(dag.c.dag_id).where(dag.c.is_active.is_(True))
)


def active_dag_ids(conn: Connection) -> list[str]:
    return sql.scalars(conn, _ACTIVE_DAG_IDS)


# ---------------------------------------------------------------- pools and caps


@dataclass(frozen=True)
class PoolRow:
    """A pool with its task counts; ``exists`` is False for a pool tasks name but nobody
    created (its tasks wait until it exists)."""

    name: str
    slots: int | None
    description: str | None
    running: int
    queued: int
    exists: bool = True


def pool_rows(conn: Connection) -> list[PoolRow]:
    """Every pool, and every pool name that task instances use without it existing."""
    counts: Counter = Counter()
    for name, state, n in sql.tuples(conn, _POOLED_STATE_COUNTS):
        counts[(name, state)] = n
    created = {r.name: r for r in sql.rows(conn, _POOLS)}
    named = {name for name, state in counts if state == TaskState.QUEUED.value}
    return [
        PoolRow(
            name,
            created[name].slots if name in created else None,
            created[name].description if name in created else None,
            counts[(name, TaskState.RUNNING.value)],
            counts[(name, TaskState.QUEUED.value)],
            exists=name in created,
        )
        for name in sorted(created.keys() | named)
    ]


_POOLED_STATE_COUNTS = Statement(
    "How many task instances of each pool they name are in each state.",
    select(ti.c.pool, ti.c.state, func.count())
    .where(ti.c.pool.is_not(None))
    .group_by(ti.c.pool, ti.c.state),
)
_POOLS = Statement("Every pool created, by name.", select(pool).order_by(pool.c.name))
QUEUED_POOLS = Statement(
    "The pools that queued task instances name.",
    select(ti.c.pool)
    .where(in_state(TaskState.QUEUED), ti.c.pool.is_not(None))
    .distinct()
    .order_by(ti.c.pool),
)
RUNNING_IN_POOL = Statement(
    "How many of a pool's task instances are running.",
    select(func.count())
    .select_from(ti)
    .where(ti.c.pool == _b("pool"), in_state(TaskState.RUNNING)),
)
QUEUED_CAPPED = Statement(
    "The (DAG, pool) pairs of queued task instances counted against a DAG's max_active_tasks.",
    select(ti.c.dag_id, ti.c.pool)
    .where(in_state(TaskState.QUEUED), ti.c.capped.is_(True))
    .distinct()
    .order_by(ti.c.dag_id, ti.c.pool),
)
RUNNING_IN_DAG = Statement(
    "How many of a DAG's task instances are running.",
    select(func.count())
    .select_from(ti)
    .where(ti.c.dag_id == _b("dag_id"), in_state(TaskState.RUNNING)),
)
MISSING_POOLS = Statement(
    "Pools that queued task instances name but nobody created.",
    select(ti.c.pool)
    .where(in_state(TaskState.QUEUED), ti.c.pool.is_not(None))
    .where(ti.c.pool.not_in(select(pool.c.name)))
    .distinct()
    .order_by(ti.c.pool),
)


# ---------------------------------------------------------------- assets

PARTITION_FINGERPRINT = Statement(
    "The content fingerprint of the partition an attempt wrote of a dataset, if it did.",
    select(partition_write.c.sha256)
    .where(
        partition_write.c.dataset == _b("dataset"),
        partition_write.c.partition_key == _b("partition_key"),
        partition_write.c.ti_id == _b("ti_id"),
        partition_write.c.fence_token == _b("fence"),
    )
    .order_by(partition_write.c.id.desc())
    .limit(1),
)


@dataclass(frozen=True)
class AssetEvent:
    """One asset event as an operator reads it, or as a run it triggered consumed it: the
    partition, its fingerprint, and the DAG, run and task that produced it (None for a run
    since deleted)."""

    id: int
    asset: str
    partition_key: str
    fingerprint: str | None
    dag_id: str | None
    task_id: str | None
    created_at: datetime
    run_id: str | None


NEW_ASSET_EVENTS = Statement(
    "Events of some assets after a DAG's cursor (up to a settled id), oldest first (what it "
    "has not looked at).",
    select(*asset_event.c["id", "asset", "partition_key", "fingerprint"])
    .where(
        asset_event.c.asset.in_(_many("assets")),
        asset_event.c.id > _b("after"),
        asset_event.c.id <= _b("upto"),
    )
    .order_by(asset_event.c.id)
    .limit(_b("limit")),
)
KEY_EVENTS = Statement(
    "Every event of some assets for one partition key, oldest first.",
    select(*asset_event.c["id", "asset", "fingerprint"])
    .where(asset_event.c.asset.in_(_many("assets")), asset_event.c.partition_key == _b("key"))
    .order_by(asset_event.c.id),
)
CONSUMED_FOR_KEY = Statement(
    "What a DAG consumed of each asset for one partition key: event and fingerprint.",
    select(*asset_consumed.c["asset", "event_id", "fingerprint"]).where(
        asset_consumed.c.dag_id == _b("dag_id"), asset_consumed.c.partition_key == _b("key")
    ),
)
ASSET_CURSOR = Statement(
    "The last asset event a DAG looked at.",
    select(asset_cursor.c.last_event_id).where(asset_cursor.c.dag_id == _b("dag_id")),
)
_KEY_LATEST = (
    select(func.max(asset_event.c.id).label("id"), func.count().label("events"))
    .group_by(asset_event.c.asset, asset_event.c.partition_key)
    .subquery("key_latest")
)
ASSET_PARTITIONS = Statement(
    "Per asset and partition key: the latest event, with the run id of the run that produced "
    "it, and how many events the key has; by asset and key.",
    select(
        *asset_event.c["id", "asset", "partition_key", "fingerprint", "dag_id", "task_id"],
        asset_event.c.created_at,
        dag_run.c.run_id,
        _KEY_LATEST.c.events,
    )
    .select_from(
        asset_event.join(_KEY_LATEST, _KEY_LATEST.c.id == asset_event.c.id).outerjoin(
            dag_run, dag_run.c.id == asset_event.c.run_pk
        )
    )
    .order_by(asset_event.c.asset, asset_event.c.partition_key),
)
CONSUMED_KEYS = Statement(
    "Every partition key of an asset an asset-scheduled DAG consumed, with the event.",
    select(*asset_consumed.c["dag_id", "asset", "partition_key", "event_id"]),
)
TRIGGERED_KEYS = Statement(
    "The asset and partition key of each event an asset-triggered run was made from, with "
    "the event and the run.",
    select(
        *asset_event.c["asset", "partition_key", "id"], *dag_run.c["dag_id", "run_id"]
    ).select_from(
        asset_trigger.join(asset_event, asset_event.c.id == asset_trigger.c.event_id).join(
            dag_run, dag_run.c.id == asset_trigger.c.run_pk
        )
    ),
)
LATEST_ASSET_EVENTS = Statement(
    "The latest event of each of some assets, with the run id of the run that produced it.",
    select(
        *asset_event.c["id", "asset", "partition_key", "fingerprint", "dag_id", "task_id"],
        asset_event.c.created_at,
        dag_run.c.run_id,
    )
    .select_from(asset_event.outerjoin(dag_run, dag_run.c.id == asset_event.c.run_pk))
    .where(
        asset_event.c.id.in_(
            select(func.max(asset_event.c.id))
            .where(asset_event.c.asset.in_(_many("assets")))
            .group_by(asset_event.c.asset)
        )
    ),
)
CONSUMED_OF_KEYS = Statement(
    "What a DAG consumed of some assets for some partition keys: event and when.",
    select(*asset_consumed.c["asset", "partition_key", "event_id", "consumed_at"]).where(
        asset_consumed.c.dag_id == _b("dag_id"),
        asset_consumed.c.asset.in_(_many("assets")),
        asset_consumed.c.partition_key.in_(_many("keys")),
    ),
)

NEW_EVENTS_BY_ASSET = Statement(
    "Per asset with events after a DAG's cursor (up to a settled id): the last one's id "
    "and when the last came (what an asset condition is evaluated over).",
    select(asset_event.c.asset, func.max(asset_event.c.id), func.max(asset_event.c.created_at))
    .where(
        asset_event.c.asset.in_(_many("assets")),
        asset_event.c.id > _b("after"),
        asset_event.c.id <= _b("upto"),
    )
    .group_by(asset_event.c.asset),
)
LAST_ASSET_EVENT = Statement(
    "The id of the latest asset event (0 with none).",
    select(func.coalesce(func.max(asset_event.c.id), 0)),
)
TRIGGERING_EVENTS = Statement(
    "The events an asset-triggered run was made from, oldest first, with the run id of the "
    "run that produced each.",
    select(
        *asset_event.c["id", "asset", "partition_key", "fingerprint", "dag_id", "task_id"],
        asset_event.c.created_at,
        dag_run.c.run_id,
    )
    .select_from(
        asset_trigger.join(asset_event, asset_event.c.id == asset_trigger.c.event_id).outerjoin(
            dag_run, dag_run.c.id == asset_event.c.run_pk
        )
    )
    .where(asset_trigger.c.run_pk == _b("run_pk"))
    .order_by(asset_event.c.id),
)


name_all(globals(), prefix="dag_reads.")

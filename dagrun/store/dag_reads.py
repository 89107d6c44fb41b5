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
from typing import TYPE_CHECKING

from dagrun.errors import DagNotFound
from dagrun.parsing.discovery import Stat
from dagrun.parsing.spec import DagSpec, FileWarning, spec_from
from dagrun.states import TaskState
from dagrun.store import sql

if TYPE_CHECKING:
    from sqlalchemy import Connection


#: The statements of this module (``queries/dag_reads.py``).
Q = sql.Catalogue("dagrun.store.queries.dag_reads", "dag_reads.")

# ---------------------------------------------------------------- DAG files and DAGs


@dataclass(frozen=True)
class KnownFile:
    """A DAG file as the registry recorded it at its last parse."""

    path: str
    content_hash: str
    dag_ids: tuple[str, ...]
    error: str | None
    error_line: int | None
    depends_on: tuple[str, ...] = ()
    #: The size and modification time ``content_hash`` was read at; None where they could
    #: not tell the file's next edit (``parsing.discovery.settled``).
    stat: Stat | None = None


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


def known_files(conn: Connection) -> dict[str, KnownFile]:
    rows = sql.rows(conn, Q.KNOWN_FILES)
    return {
        r.path: KnownFile(
            r.path,
            r.content_hash,
            tuple(json.loads(r.dag_ids)),
            r.error,
            r.error_line,
            tuple(json.loads(r.depends_on or "[]")),
            None if r.size is None or r.mtime_ns is None else Stat(r.size, r.mtime_ns),
        )
        for r in rows
    }


#: The ``dagrun_meta`` keys of the fingerprint of the code that parsed the files recorded,
#: and of the dags folder the store serves (the first one synced into it).
PARSED_BY_KEY = "parsed_by"
SERVED_FOLDER_KEY = "dags_folder"


def parsed_by(conn: Connection) -> str | None:
    """Which code parsed the files recorded: files parsed by other code are parsed again
    (what a file makes, or why it fails, depends on dagrun's version as much as on it)."""
    return sql.scalar(conn, Q.META_VALUE, {"b_key": PARSED_BY_KEY})


def served_folder(conn: Connection) -> str | None:
    """The dags folder this store serves: commands run from elsewhere read it, never
    replace it (``dagrun db rebind-folder`` moves it). None until a first sync binds one."""
    return sql.scalar(conn, Q.META_VALUE, {"b_key": SERVED_FOLDER_KEY})


def import_errors(conn: Connection) -> list[KnownFile]:
    return [
        KnownFile(r.path, r.content_hash, (), r.error, r.error_line)
        for r in sql.rows(conn, Q.IMPORT_ERRORS)
    ]


@dataclass(frozen=True)
class FileWarnings:
    """A DAG file's warnings from its last parse (``dags errors --warnings``)."""

    path: str
    warnings: tuple[FileWarning, ...]


def file_warnings(conn: Connection) -> list[FileWarnings]:
    return [
        FileWarnings(r.path, tuple(FileWarning.from_json(w) for w in json.loads(r.warnings)))
        for r in sql.rows(conn, Q.FILE_WARNINGS)
    ]


def good_source(conn: Connection, path: str) -> str | None:
    """The source of ``path``'s last parse that succeeded (what runs while the file fails)."""
    return sql.scalar(conn, Q.GOOD_SOURCE, {"b_path": path})


@dataclass(frozen=True)
class FileSource:
    """What the web page shows of a DAG file: the source its DAGs run from (that of its last
    parse that succeeded; None if the store kept none), and the error of its last parse."""

    path: str
    parsed_at: datetime
    source: str | None
    error: str | None
    error_line: int | None


def file_source(conn: Connection, path: str) -> FileSource | None:
    """The source and last parse of the file at ``path``; None for a file no longer known."""
    row = sql.first(conn, Q.FILE_SOURCE, {"b_path": path})
    return None if row is None else FileSource(*row)


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
    return [_dag_row(r) for r in sql.rows(conn, Q.ACTIVE_DAGS)]


def get_dag(conn: Connection, dag_id: str, *, active: bool = True) -> DagRow:
    """One DAG; ``active=False`` also finds a DAG whose file no longer defines it (its runs
    outlive the file)."""
    row = sql.first(conn, Q.ACTIVE_DAG if active else Q.DAG, {"b_dag_id": dag_id})
    if row is None:
        raise DagNotFound(dag_id)
    return _dag_row(row)


def load_spec(conn: Connection, dag_id: str) -> DagSpec:
    """The stored spec of a DAG, active or not (runs outlive the file that made them)."""
    row = sql.first(conn, Q.SPEC, {"b_dag_id": dag_id})
    if row is None:
        raise DagNotFound(dag_id)
    return spec_from(row.spec_hash, row.spec)


def active_dag_ids(conn: Connection) -> list[str]:
    return sql.scalars(conn, Q.ACTIVE_DAG_IDS)


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
    for name, state, n in sql.tuples(conn, Q.POOLED_STATE_COUNTS):
        counts[(name, state)] = n
    created = {r.name: r for r in sql.rows(conn, Q.POOLS)}
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


# ---------------------------------------------------------------- assets


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

"""The DAG registry's writes: parsed files, their DAG specs, pause flags and DAG caps; and a
spec cache.

Written by the DAG sync (parser output) and by ``dags pause``; read through ``dag_reads``.
A DAG whose file breaks keeps its last good spec (the sync does not save a failed file's
DAGs), and the file's row keeps the source of its last good parse for the workers.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from dagrun.errors import DagNotFound
from dagrun.parsing.discovery import Stat
from dagrun.parsing.spec import DagSpec, FileWarning
from dagrun.store import dag_reads, sql

if TYPE_CHECKING:
    from sqlalchemy import Connection


#: The statements of this module (``queries/registry.py``).
Q = sql.Catalogue("dagrun.store.queries.registry", "registry.")

# ---------------------------------------------------------------- statements


@dataclass(frozen=True)
class ParsedFile:
    """One parsed file as the registry records it. ``dag_ids`` are the DAGs it owns (the
    last good parse's while it fails); ``good_source`` is set when this parse succeeded;
    ``warnings`` are this parse's (a file that failed to import has none)."""

    path: str
    content_hash: str
    specs: list[DagSpec]
    error: str | None = None
    error_line: int | None = None
    depends_on: tuple[str, ...] = ()
    dag_ids: tuple[str, ...] | None = None
    good_source: str | None = None
    warnings: tuple[FileWarning, ...] = ()
    #: The size and modification time its content was read at, where they tell its next
    #: edit (``dag_reads.KnownFile.stat``).
    stat: Stat | None = None


def save_file(
    conn: Connection,
    path: str,
    content_hash: str,
    specs: list[DagSpec],
    error: str | None,
    error_line: int | None,
    now: datetime,
) -> None:
    """Record one parsed file and upsert its DAGs (keeping their pause flag and cursor)."""
    save_files(conn, [ParsedFile(path, content_hash, specs, error, error_line)], now)


def save_files(conn: Connection, files: list[ParsedFile], now: datetime) -> None:
    """Record parsed files and upsert their DAGs in two batched statements."""
    rows = [
        {
            "b_path": f.path,
            "b_content_hash": f.content_hash,
            "b_parsed_at": now,
            "b_dag_ids": json.dumps(
                list(f.dag_ids) if f.dag_ids is not None else [s.dag_id for s in f.specs]
            ),
            "b_error": f.error,
            "b_error_line": f.error_line,
            "b_depends_on": json.dumps(sorted(f.depends_on)),
            "b_good_source": f.good_source,
            "b_warnings": json.dumps([w.to_json() for w in f.warnings]),
            "b_size": f.stat.size if f.stat else None,
            "b_mtime_ns": f.stat.mtime_ns if f.stat else None,
        }
        for f in files
    ]
    sql.execute_many(conn, Q.UPSERT_DAG_FILES, rows)
    save_dags(conn, [spec for f in files for spec in f.specs], now)


def record_stats(conn: Connection, stats: dict[str, Stat]) -> None:
    """Record the stats of files whose content is the one recorded (path -> stat), so the
    next sync takes them as unchanged without reading them."""
    sql.execute_many(
        conn,
        Q.RECORD_FILE_STATS,
        [{"b_path": p, "b_size": s.size, "b_mtime_ns": s.mtime_ns} for p, s in stats.items()],
    )


def save_dag(conn: Connection, spec: DagSpec, now: datetime) -> None:
    save_dags(conn, [spec], now)


def save_dags(conn: Connection, specs: list[DagSpec], now: datetime) -> None:
    """Upsert DAG rows: a new DAG starts (un)paused as it asks; an existing one keeps its
    pause flag and scheduler cursor. A DAG with an asset condition gets its cursor over
    asset events the first time (``asset_triggers.start_cursors``)."""
    rows = []
    for spec in specs:
        text = spec.to_json()
        rows.append(
            {
                "b_dag_id": spec.dag_id,
                "b_fileloc": spec.fileloc,
                "b_schedule": spec.schedule_text,
                "b_timezone": spec.timezone,
                "b_is_active": True,
                "b_is_paused": spec.is_paused_upon_creation,
                "b_spec": text,
                "b_spec_hash": spec.digest,
                "b_next_logical_date": None,
                "b_created_at": now,
                "b_updated_at": now,
            }
        )
    sql.execute_many(conn, Q.UPSERT_DAGS, rows)
    if any(s.condition is not None for s in specs):
        # Imported for such DAGs only: it brings the run transitions, which a sync of
        # plain DAGs (a first ``dags list``) has no use for.
        from dagrun.store import asset_triggers

        asset_triggers.start_cursors(conn, specs)
    capped = [s for s in specs if s.max_active_tasks is not None]
    sql.execute_many(
        conn,
        Q.UPSERT_DAG_CAP,
        [{"b_dag_id": s.dag_id, "b_max_active_tasks": s.max_active_tasks} for s in capped],
    )
    uncapped = [s.dag_id for s in specs if s.max_active_tasks is None]
    if uncapped:
        sql.execute(conn, Q.DELETE_DAG_CAPS, {"b_dag_ids": uncapped})


def forget_files(conn: Connection, paths: list[str]) -> None:
    if paths:
        sql.execute(conn, Q.DELETE_DAG_FILES, {"b_paths": paths})


def deactivate_missing(conn: Connection, active_ids: set[str]) -> None:
    """DAGs no longer defined by any file stay in history but stop being scheduled."""
    gone = [d for d in dag_reads.active_dag_ids(conn) if d not in active_ids]
    if gone:
        sql.execute(conn, Q.DEACTIVATE_DAGS, {"b_dag_ids": gone})


def set_paused(conn: Connection, dag_id: str, paused: bool) -> None:
    if not sql.execute(conn, Q.SET_PAUSED, {"b_dag_id": dag_id, "b_paused": paused}).rowcount:
        raise DagNotFound(dag_id)


class SpecCache:
    """Specs by dag_id for a long-running process, re-read at most every ``ttl`` seconds."""

    def __init__(self, ttl: float = 2.0):
        self.ttl = ttl
        self._entries: dict[str, tuple[float, DagSpec]] = {}

    def get(self, conn: Connection, dag_id: str) -> DagSpec:
        now = time.monotonic()
        entry = self._entries.get(dag_id)
        if entry is None or now - entry[0] > self.ttl:
            entry = self._entries[dag_id] = (now, dag_reads.load_spec(conn, dag_id))
        return entry[1]

    def bound(self, conn: Connection) -> Callable[[str], DagSpec]:
        return lambda dag_id: self.get(conn, dag_id)


def set_parsed_by(conn: Connection, fingerprint: str) -> None:
    """Say which code parsed the files now recorded (``dag_reads.parsed_by``)."""
    sql.execute(conn, Q.SET_META, {"b_key": dag_reads.PARSED_BY_KEY, "b_value": fingerprint})


def bind_folder(conn: Connection, folder: str) -> None:
    """Make ``folder`` the dags folder the store serves (``dag_reads.served_folder``)."""
    sql.execute(conn, Q.SET_META, {"b_key": dag_reads.SERVED_FOLDER_KEY, "b_value": folder})

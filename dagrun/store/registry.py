"""The DAG registry: which files were parsed, which DAGs they define, import errors, pause.

Written by the DAG sync (parser output), read by everything else. Specs are cached by their
hash so a scheduler tick does not re-decode JSON for DAGs that did not change.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, delete, func, select, update

from dagrun.errors import DagNotFound
from dagrun.spec import DagSpec, digest_of
from dagrun.store.engine import dialect_insert
from dagrun.store.schema import dag, dag_file, pool, task_instance

_SPEC_CACHE: dict[str, DagSpec] = {}


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
    dag_id: str
    fileloc: str
    is_paused: bool
    spec: DagSpec
    next_logical_date: datetime | None


def spec_from(spec_hash: str, spec_json: str) -> DagSpec:
    cached = _SPEC_CACHE.get(spec_hash)
    if cached is None:
        cached = _SPEC_CACHE[spec_hash] = DagSpec.from_json(spec_json)
    return cached


def known_files(conn: Connection) -> dict[str, KnownFile]:
    rows = conn.execute(select(dag_file)).mappings()
    return {
        r["path"]: KnownFile(
            r["path"],
            r["content_hash"],
            tuple(json.loads(r["dag_ids"])),
            r["error"],
            r["error_line"],
            tuple(json.loads(r["depends_on"] or "[]")),
        )
        for r in rows
    }


@dataclass(frozen=True)
class ParsedFile:
    """One parsed file as the registry records it."""

    path: str
    content_hash: str
    specs: list[DagSpec]
    error: str | None = None
    error_line: int | None = None
    depends_on: tuple[str, ...] = ()


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
    if not files:
        return
    stmt = dialect_insert(conn.dialect.name, dag_file)
    conn.execute(
        stmt.on_conflict_do_update(
            index_elements=["path"],
            set_={
                c: stmt.excluded[c]
                for c in (
                    "content_hash",
                    "parsed_at",
                    "dag_ids",
                    "error",
                    "error_line",
                    "depends_on",
                )
            },
        ),
        [
            {
                "path": f.path,
                "content_hash": f.content_hash,
                "parsed_at": now,
                "dag_ids": json.dumps([s.dag_id for s in f.specs]),
                "error": f.error,
                "error_line": f.error_line,
                "depends_on": json.dumps(sorted(f.depends_on)),
            }
            for f in files
        ],
    )
    save_dags(conn, [spec for f in files for spec in f.specs], now)


def save_dag(conn: Connection, spec: DagSpec, now: datetime) -> None:
    save_dags(conn, [spec], now)


_DAG_CHANGED = ("fileloc", "schedule", "timezone", "is_active", "spec", "spec_hash", "updated_at")


def save_dags(conn: Connection, specs: list[DagSpec], now: datetime) -> None:
    """Upsert DAG rows: a new DAG starts (un)paused as it asks; an existing one keeps its
    pause flag and scheduler cursor."""
    if not specs:
        return
    stmt = dialect_insert(conn.dialect.name, dag)
    rows = []
    for spec in specs:
        text = spec.to_json()
        rows.append(
            {
                "dag_id": spec.dag_id,
                "fileloc": spec.fileloc,
                "schedule": spec.schedule_text,
                "timezone": spec.timezone,
                "is_active": True,
                "is_paused": spec.is_paused_upon_creation,
                "spec": text,
                "spec_hash": digest_of(text),
                "created_at": now,
                "updated_at": now,
            }
        )
    conn.execute(
        stmt.on_conflict_do_update(
            index_elements=["dag_id"], set_={c: stmt.excluded[c] for c in _DAG_CHANGED}
        ),
        rows,
    )


def forget_files(conn: Connection, paths: list[str]) -> None:
    if paths:
        conn.execute(delete(dag_file).where(dag_file.c.path.in_(paths)))


def deactivate_missing(conn: Connection, active_ids: set[str]) -> None:
    """DAGs no longer defined by any file stay in history but stop being scheduled."""
    rows = conn.execute(select(dag.c.dag_id).where(dag.c.is_active.is_(True))).scalars()
    gone = [d for d in rows if d not in active_ids]
    if gone:
        conn.execute(update(dag).where(dag.c.dag_id.in_(gone)).values(is_active=False))


def set_paused(conn: Connection, dag_id: str, paused: bool) -> None:
    result = conn.execute(
        update(dag)
        .where(dag.c.dag_id == dag_id, dag.c.is_active.is_(True))
        .values(is_paused=paused)
    )
    if result.rowcount == 0:
        raise DagNotFound(dag_id)


def active_dags(conn: Connection) -> list[DagRow]:
    rows = conn.execute(
        select(dag).where(dag.c.is_active.is_(True)).order_by(dag.c.dag_id)
    ).mappings()
    return [_dag_row(r) for r in rows]


def get_dag(conn: Connection, dag_id: str) -> DagRow:
    row = (
        conn.execute(select(dag).where(dag.c.dag_id == dag_id, dag.c.is_active.is_(True)))
        .mappings()
        .first()
    )
    if row is None:
        raise DagNotFound(dag_id)
    return _dag_row(row)


def _dag_row(r) -> DagRow:
    return DagRow(
        dag_id=r["dag_id"],
        fileloc=r["fileloc"],
        is_paused=bool(r["is_paused"]),
        spec=spec_from(r["spec_hash"], r["spec"]),
        next_logical_date=r["next_logical_date"],
    )


def import_errors(conn: Connection) -> list[KnownFile]:
    rows = conn.execute(
        select(dag_file).where(dag_file.c.error.is_not(None)).order_by(dag_file.c.path)
    ).mappings()
    return [KnownFile(r["path"], r["content_hash"], (), r["error"], r["error_line"]) for r in rows]


def load_spec(conn: Connection, dag_id: str) -> DagSpec:
    """The stored spec of a DAG, active or not (runs outlive the file that made them)."""
    row = conn.execute(select(dag.c.spec_hash, dag.c.spec).where(dag.c.dag_id == dag_id)).first()
    if row is None:
        raise DagNotFound(dag_id)
    return spec_from(row.spec_hash, row.spec)


class SpecCache:
    """Specs by dag_id for a long-running process, re-read at most every ``ttl`` seconds."""

    def __init__(self, ttl: float = 2.0):
        self.ttl = ttl
        self._entries: dict[str, tuple[float, DagSpec]] = {}

    def get(self, conn: Connection, dag_id: str) -> DagSpec:
        now = time.monotonic()
        entry = self._entries.get(dag_id)
        if entry is None or now - entry[0] > self.ttl:
            entry = self._entries[dag_id] = (now, load_spec(conn, dag_id))
        return entry[1]

    def bound(self, conn: Connection) -> Callable[[str], DagSpec]:
        return lambda dag_id: self.get(conn, dag_id)


@dataclass(frozen=True)
class PoolRow:
    name: str
    slots: int
    description: str | None
    running: int
    queued: int


def set_pool(conn: Connection, name: str, slots: int, description: str | None) -> None:
    """Create or resize a pool: at most ``slots`` of its tasks run at once, on all workers."""
    stmt = dialect_insert(conn.dialect.name, pool)
    stmt = stmt.values(name=name, slots=slots, description=description)
    conn.execute(
        stmt.on_conflict_do_update(
            index_elements=["name"], set_={"slots": slots, "description": description}
        )
    )


def delete_pool(conn: Connection, name: str) -> bool:
    return conn.execute(delete(pool).where(pool.c.name == name)).rowcount > 0


def pools(conn: Connection) -> list[PoolRow]:
    """Every pool with its running and queued task counts."""
    counts: dict[tuple[str, str], int] = {
        (name, state): n
        for name, state, n in conn.execute(
            select(task_instance.c.pool, task_instance.c.state, func.count())
            .where(task_instance.c.pool.is_not(None))
            .group_by(task_instance.c.pool, task_instance.c.state)
        )
    }
    return [
        PoolRow(
            r.name,
            r.slots,
            r.description,
            counts.get((r.name, "running"), 0),
            counts.get((r.name, "queued"), 0),
        )
        for r in conn.execute(select(pool).order_by(pool.c.name))
    ]

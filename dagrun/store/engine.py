"""Engines, transactions and dialect capabilities for SQLite and PostgreSQL.

SQLite is the embedded default: WAL so readers never block the writer, a busy timeout so
writers queue instead of failing, foreign keys on, ``synchronous=NORMAL`` (see
``SQLITE_SYNCHRONOUS``), and every write transaction opened with ``BEGIN IMMEDIATE`` so two
writers serialise at the start instead of deadlocking on lock upgrade. PostgreSQL is the
scale-out engine; its differences are named as capabilities, not ``if sqlite`` checks, and it
tells listening workers when work is queued (``WORK_CHANNEL``).
"""

from __future__ import annotations

import getpass
import json
import logging
import os
import sqlite3
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import Connection, Engine, create_engine, event, inspect, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError, SQLAlchemyError

from dagrun.errors import StoreError
from dagrun.store import schema

log = logging.getLogger("dagrun.store")
_ENGINES: weakref.WeakSet[Engine] = weakref.WeakSet()

#: WAL with NORMAL is always consistent and survives any process crash; only an OS crash or
#: power cut can roll back the last commits, which every dagrun transition tolerates (a task
#: that ran again rewrites the same partition). FULL adds an fsync per commit.
SQLITE_SYNCHRONOUS = os.environ.get("DAGRUN_SQLITE_SYNCHRONOUS", "NORMAL").upper()


def _dispose_after_fork() -> None:
    """A forked child must never reuse its parent's connections (it would corrupt them)."""
    for engine in list(_ENGINES):
        engine.dispose(close=False)


os.register_at_fork(after_in_child=_dispose_after_fork)


def dagrun_home() -> Path:
    return Path(os.environ.get("DAGRUN_HOME", ".dagrun")).absolute()


def default_url() -> str:
    return f"sqlite:///{dagrun_home() / 'dagrun.db'}"


def normalise_url(url: str) -> str:
    """``postgresql://`` means psycopg 3, as DESIGN promises."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


@dataclass(frozen=True)
class Capabilities:
    """What the database can do, so callers ask for a feature rather than a dialect name."""

    skip_locked: bool
    server_clock: bool
    single_writer: bool


class Store:
    """One database: transactions, the clock that decides leases, and the schema."""

    def __init__(self, url: str | None = None, *, create: bool = True):
        self.url = normalise_url(url or os.environ.get("DAGRUN_DB_URL") or default_url())
        self.engine = _make_engine(self.url)
        _ENGINES.add(self.engine)
        dialect = self.engine.dialect.name
        self.caps = Capabilities(
            skip_locked=dialect == "postgresql",
            server_clock=dialect == "postgresql",
            single_writer=dialect == "sqlite",
        )
        if create:
            self.ensure_schema()

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def __repr__(self) -> str:
        return f"<Store {self.engine.url.render_as_string(hide_password=True)}>"

    @contextmanager
    def write(self) -> Iterator[Connection]:
        """A write transaction (``BEGIN IMMEDIATE`` on SQLite), committed on success."""
        try:
            with self.engine.connect() as conn:
                conn = conn.execution_options(dagrun_write=True)
                with conn.begin():
                    yield conn
        except OperationalError as exc:
            raise StoreError(f"database error: {_first_line(exc)}") from exc

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A short read transaction: a consistent snapshot that never blocks writers."""
        try:
            with self.engine.connect() as conn, conn.begin():
                yield conn
        except OperationalError as exc:
            raise StoreError(f"database error: {_first_line(exc)}") from exc

    def now(self, conn: Connection | None = None) -> datetime:
        """The clock that decides leases: the server's on PostgreSQL, this host's on SQLite."""
        if not self.caps.server_clock:
            return datetime.now(UTC)
        if conn is not None:
            return conn.execute(text("SELECT now()")).scalar_one().astimezone(UTC)
        with self.read() as c:
            return c.execute(text("SELECT now()")).scalar_one().astimezone(UTC)

    def ensure_schema(self) -> None:
        """Create the schema on first use, bring an older one up to date, refuse a database
        from a newer dagrun."""
        try:
            with self.write() as conn:
                if self.dialect == "postgresql":
                    conn.execute(text("SELECT pg_advisory_xact_lock(7061726) "))
                if not inspect(conn).has_table("dagrun_meta"):
                    schema.metadata.create_all(conn)
                    conn.execute(
                        schema.meta.insert().values(
                            key="schema_version", value=str(schema.SCHEMA_VERSION)
                        )
                    )
                    return
                version = self.schema_version(conn)
                if version < schema.SCHEMA_VERSION:
                    _migrate(conn, version)
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot open the database {self!r}: {_first_line(exc)}") from exc
        if version > schema.SCHEMA_VERSION:
            raise StoreError(
                f"the database has schema version {version}, newer than this dagrun "
                f"({schema.SCHEMA_VERSION}); upgrade dagrun"
            )

    def schema_version(self, conn: Connection) -> int:
        row = conn.execute(
            select(schema.meta.c.value).where(schema.meta.c.key == "schema_version")
        ).scalar_one_or_none()
        return int(row) if row is not None else 0

    def audit(self, conn: Connection, action: str, dag_id: str | None, **detail: object) -> None:
        """Record an operator action (clear, backfill, pause...) for later inspection."""
        conn.execute(
            schema.audit_log.insert().values(
                at=self.now(conn),
                action=action,
                dag_id=dag_id,
                actor=_actor(),
                detail=json.dumps(detail, default=str, sort_keys=True),
            )
        )

    def listen(self) -> Listener | None:
        """PostgreSQL: a connection of its own that hears when work is queued (see
        ``WORK_CHANNEL``); None on SQLite, whose workers poll."""
        if self.dialect != "postgresql":
            return None
        try:
            return Listener(self.engine)
        except Exception as exc:  # any driver error: polling still works without it
            log.warning("cannot listen for queued work, polling only: %s", _first_line(exc))
            return None

    def dispose(self) -> None:
        self.engine.dispose()


#: Every transaction that puts tasks in the queue on PostgreSQL sends one notification on
#: this channel when it commits, so an idle worker claims them at once, not at its next poll.
WORK_CHANNEL = "dagrun_work"


class Listener:
    """An autocommit connection LISTENing on ``WORK_CHANNEL``; poll its ``fileno``."""

    def __init__(self, engine: Engine) -> None:
        import psycopg

        args, kwargs = engine.dialect.create_connect_args(engine.url)
        self._conn = psycopg.connect(*args, **{**kwargs, "autocommit": True})
        self._conn.execute(f"LISTEN {WORK_CHANNEL}")

    def fileno(self) -> int:
        return self._conn.fileno()

    def heard(self) -> bool:
        """Take the notifications that arrived, without waiting; whether there were any."""
        return any(True for _ in self._conn.notifies(timeout=0))

    def close(self) -> None:
        self._conn.close()


def _migrate(conn: Connection, version: int) -> None:
    """Apply every step after ``version``, then record the new version (one transaction)."""
    for step in range(version + 1, schema.SCHEMA_VERSION + 1):
        for statement in schema.MIGRATIONS.get(step, []):
            conn.execute(text(statement))
    conn.execute(
        schema.meta.update()
        .where(schema.meta.c.key == "schema_version")
        .values(value=str(schema.SCHEMA_VERSION))
    )


def _actor() -> str:
    try:
        return getpass.getuser()
    except Exception:
        return "unknown"


def _first_line(exc: BaseException) -> str:
    text_ = str(getattr(exc, "orig", None) or exc).strip()
    return text_.splitlines()[0] if text_ else type(exc).__name__


def _make_engine(url: str) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=5)
    database = parsed.database
    if database and database != ":memory:":
        try:
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the SQLite folder for {database}: {exc}") from exc
    engine = create_engine(url, connect_args={"timeout": 60})
    event.listen(engine, "connect", _sqlite_connect)
    event.listen(engine, "begin", _sqlite_begin)
    return engine


def _sqlite_connect(dbapi_conn, _record) -> None:
    dbapi_conn.isolation_level = None
    cursor = dbapi_conn.cursor()
    _use_wal(cursor)
    cursor.execute(f"PRAGMA synchronous={SQLITE_SYNCHRONOUS}")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=60000")
    cursor.close()


def _use_wal(cursor) -> None:
    """Switch a database to WAL once (it stays so). Several processes opening a brand-new
    database at once may find it busy: the switch takes an exclusive lock that SQLite does
    not wait for, so try again briefly."""
    for attempt in range(100):
        try:
            if cursor.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal":
                return
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError:
            if attempt == 99:
                raise
            time.sleep(0.05)


def _sqlite_begin(conn: Connection) -> None:
    if conn.get_execution_options().get("dagrun_write"):
        conn.exec_driver_sql("BEGIN IMMEDIATE")
    else:
        conn.exec_driver_sql("BEGIN")


def dialect_insert(dialect: str, table):
    """The dialect's INSERT, which knows ``ON CONFLICT`` on both SQLite and PostgreSQL."""
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert(table)

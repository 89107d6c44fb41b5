"""Engines, transactions and dialect capabilities for SQLite and PostgreSQL.

SQLite is the embedded default: WAL so readers never block the writer, a busy timeout so
writers queue instead of failing, foreign keys on, ``synchronous=NORMAL`` (see
``SQLITE_SYNCHRONOUS``), and every write transaction opened with ``BEGIN IMMEDIATE`` so two
writers serialise at the start instead of deadlocking on lock upgrade. PostgreSQL is the
scale-out engine; its differences are named as capabilities, not ``if sqlite`` checks, and it
tells listening workers when work is queued (``WORK_CHANNEL``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import sqlite3
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, cast

from dagrun import processes, settings
from dagrun.errors import (
    NotDagrunStore,
    OutageTooLong,
    StoreDamaged,
    StoreError,
    StoreFull,
    StoreLocked,
    StoreUnavailable,
)
from dagrun.store import direct, rendered, sql
from dagrun.store.direct import DirectConnection, DirectPool
from dagrun.store.location import sqlite_file, store_url
from dagrun.store.outage import (
    OUTAGE_SECONDS,
    VALUE_ERRORS,
    Backoff,
    Health,
    driver_errors,
    first_line,
    translate,
    where,
)
from dagrun.store.protocol import SCHEMA_VERSION, WORK_CHANNEL
from dagrun.store.sqlalchemy_engine import (
    PG_CONNECT_ARGS,
    SQLITE_SYNCHRONOUS,
    foreign_keys_back_on,
    make_engine,
    sqlite_folder,
    total_changes,
)

if TYPE_CHECKING:
    from sqlalchemy import Connection, Engine

#: The statements of this module (``queries/engine.py``).
Q = sql.Catalogue("dagrun.store.queries.engine", "engine.")

log = logging.getLogger("dagrun.store")


@dataclass(frozen=True)
class Capabilities:
    """What the database can do, so callers ask for a feature rather than a dialect name."""

    #: Times that decide leases come from the server (``now()``), not from each host.
    server_clock: bool
    #: Workers can LISTEN for queued work instead of only polling.
    notifies: bool
    #: Transactions write at once, so rows may commit out of the order of their ids (a
    #: reader of new asset events waits for a settled id: ``asset_triggers.settled``).
    concurrent_writers: bool


def capabilities(dialect: str) -> Capabilities:
    postgres = dialect == "postgresql"
    return Capabilities(server_clock=postgres, notifies=postgres, concurrent_writers=postgres)


class Store:
    """One database: transactions, the clock that decides leases, and the schema.

    Every failure of a transaction is a ``StoreError``: ``StoreUnavailable`` when the
    database cannot be reached or the connection was lost, ``StoreConflict`` when the
    transaction lost a race and may simply be tried again. A long-running process calls
    ``ride_out_outages``: from then on the first failure of an outage and the first success
    after it are logged once each (``health``), and its loops retry until the limit.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        create: bool = True,
        only_home_folder: bool = False,
        direct: bool = False,
    ):
        """``only_home_folder`` (what the command line asks for): a SQLite file's missing
        folder is made only under ``DAGRUN_HOME``; any other is ``StoreFolderMissing``.
        ``direct`` (what commands ask for): a SQLite file is used on Python's own driver
        (``direct``), SQLAlchemy's engine only to create or migrate the schema; a caller
        that runs SQLAlchemy expressions on the store's connections leaves it off."""
        self.url = store_url(url)
        self.health: Health | None = None
        self._only_home_folder = only_home_folder
        database = sqlite_file(self.url) if direct else None
        self._direct: DirectPool | None = None
        if database is None:
            self.dialect: str = self.engine.dialect.name
        else:
            sqlite_folder(self.url, Path(database).absolute().parent, only_home_folder)
            self._direct = DirectPool(
                self.url,
                database,
                busy_seconds=settings.get("database.sqlite_busy_seconds"),
                synchronous=SQLITE_SYNCHRONOUS,
            )
            self.dialect = "sqlite"
        self.caps = capabilities(self.dialect)
        if create:
            self.ensure_schema()

    @functools.cached_property
    def engine(self) -> Engine:
        """SQLAlchemy's engine (made on first use: a direct store makes it only to create
        or migrate the schema)."""
        return make_engine(self.url, self._only_home_folder)

    def __repr__(self) -> str:
        return f"<Store {where(self.url) if self._direct else _shown(self.engine)}>"

    @classmethod
    def when_available(
        cls,
        url: str | None = None,
        limit: float | None = None,
        *,
        only_home_folder: bool = False,
        direct: bool = False,
    ) -> Store:
        """A store for a long-running process that may start while the database is away:
        opening it is retried (logged once) for up to the outage limit, and later outages
        are ridden out too (``ride_out_outages``)."""
        limit = OUTAGE_SECONDS if limit is None else limit
        started, backoff = time.monotonic(), Backoff()
        while True:
            try:
                store = cls(url, only_home_folder=only_home_folder, direct=direct)
                break
            except StoreUnavailable as exc:
                waited = time.monotonic() - started
                if waited > limit:
                    raise OutageTooLong(waited, limit, exc) from exc
                if not backoff.failures:
                    log.warning("database unavailable, waiting up to %g s: %s", limit, exc)
                time.sleep(backoff.next())
        if backoff.failures:
            log.warning("database is back after %.1f s", time.monotonic() - started)
        store.ride_out_outages(limit)
        return store

    def ride_out_outages(self, limit: float | None = None) -> Health:
        """Report this store's outages once each, for a long-running process."""
        self.health = Health(OUTAGE_SECONDS if limit is None else limit)
        return self.health

    @contextmanager
    def write(self) -> Iterator[Connection]:
        """A write transaction (``BEGIN IMMEDIATE`` on SQLite), committed on success."""
        with self._transaction(dagrun_write=True) as conn:
            yield conn

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A short read transaction: a consistent snapshot that never blocks writers."""
        with self._transaction() as conn:
            yield conn

    @property
    def where(self) -> str:
        """The database as messages name it (``outage.where``)."""
        return where(self.url)

    @contextmanager
    def _transaction(self, **options: object) -> Iterator[Connection]:
        """Every driver error of the transaction, however it reached here, leaves as a
        ``StoreError`` (``translate``), except a mistake in a statement (a bug)."""
        if self._direct is not None and not options.get("dagrun_schema"):
            with self._direct_transaction(bool(options.get("dagrun_write"))) as conn:
                yield conn
            return
        try:
            with processes.FORK_GUARD.using(), self.engine.connect() as conn:
                if options:
                    conn = conn.execution_options(**options)
                changes = total_changes(conn)
                try:
                    with conn.begin():
                        yield conn
                finally:
                    if options.get("dagrun_schema") and self.dialect == "sqlite":
                        foreign_keys_back_on(conn)
                wrote = bool(options.get("dagrun_write")) and (
                    changes is None or total_changes(conn) != changes
                )
        except driver_errors(*VALUE_ERRORS) as exc:
            self._failed(exc)
        if self.health is not None:
            self.health.ok(wrote)

    @contextmanager
    def _direct_transaction(self, write: bool) -> Iterator[Connection]:
        assert self._direct is not None
        try:
            with processes.FORK_GUARD.using(), self._direct.transaction(write=write) as conn:
                changes = conn.total_changes
                yield cast("Connection", conn)  # what ``sql`` runs statements on, either way
                wrote = write and conn.total_changes != changes
        except driver_errors(*VALUE_ERRORS) as exc:
            self._failed(exc)
        if self.health is not None:
            self.health.ok(wrote)

    def _failed(self, exc: Exception) -> None:
        """Raise a driver's error as dagrun's (a mistake in a statement as it is)."""
        error = translate(exc, self.url)
        if error is None:
            raise exc
        if self.health is not None:
            self.health.failed(error)
        raise error from exc

    def now(self, conn: Connection | None = None) -> datetime:
        """The clock that decides leases: the server's on PostgreSQL, this host's on SQLite."""
        if not self.caps.server_clock:
            return datetime.now(UTC)
        if conn is not None:
            return sql.scalar(conn, Q.SERVER_NOW).astimezone(UTC)
        with self.read() as c:
            return sql.scalar(c, Q.SERVER_NOW).astimezone(UTC)

    def ensure_schema(self) -> None:
        """Create the schema on first use, bring an older one up to date, refuse a database
        from a newer dagrun. A direct store reads its version first: only a new or older
        schema needs SQLAlchemy."""
        try:
            version = self._direct_version() if self._direct is not None else None
            if version is None and self._direct is not None:
                version = self._direct_create()
            if version != SCHEMA_VERSION:
                version = self._create_or_migrate()
        except _NAMES_THE_DATABASE:
            raise
        except StoreError as exc:
            raise type(exc)(f"cannot open the database {self!r}: {exc}") from exc
        except _sqlalchemy_errors() as exc:
            raise StoreError(f"cannot open the database {self!r}: {first_line(exc)}") from exc
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"the database has schema version {version}, newer than this dagrun "
                f"({SCHEMA_VERSION}); upgrade dagrun"
            )

    def _direct_version(self) -> int | None:
        """The schema version of a direct store; None when it has no dagrun schema yet."""
        with self.read() as conn:
            if "dagrun_meta" not in table_names(conn):
                return None
            return self.schema_version(conn)

    def _direct_create(self) -> int | None:
        """A new schema made by a direct store, with the DDL an earlier process rendered
        (``rendered``); None when there is none yet or another process made the schema
        first (``_create_or_migrate`` then does what is left)."""
        ddl = rendered.get(self.dialect, _SCHEMA_DDL)
        if ddl is None:
            return None
        with self.write() as conn:
            if "dagrun_meta" in table_names(conn):
                return None
            refuse_foreign(conn, self.where)
            driver = cast("DirectConnection", conn).driver
            for statement in ddl:
                driver.execute(statement)
            sql.execute(conn, Q.INSERT_SCHEMA_VERSION, {"b_value": str(SCHEMA_VERSION)})
        return SCHEMA_VERSION

    def _create_or_migrate(self) -> int:
        """The schema made or brought up to date (through SQLAlchemy); the version found."""
        from sqlalchemy import text

        from dagrun.store.queries import every_statement

        with self._transaction(dagrun_write=True, dagrun_schema=True) as conn:
            if self.dialect == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(7061726) "))
            if "dagrun_meta" not in table_names(conn):
                refuse_foreign(conn, self.where)
                for statement in _create_statements(conn.dialect):
                    conn.exec_driver_sql(statement)
                sql.execute(conn, Q.INSERT_SCHEMA_VERSION, {"b_value": str(SCHEMA_VERSION)})
                version = SCHEMA_VERSION
            else:
                version = self.schema_version(conn)
                if version < SCHEMA_VERSION:
                    _migrate(conn, version)
        sql.render_all(self.dialect, every_statement)
        return version

    def schema_version(self, conn: Connection) -> int:
        row = sql.scalar(conn, Q.SCHEMA_VERSION)
        return int(row) if row is not None else 0

    def listen(self) -> Listener | None:
        """PostgreSQL: a connection of its own that hears when work is queued (see
        ``WORK_CHANNEL``); None on SQLite, whose workers poll, or while it cannot connect."""
        if not self.caps.notifies:
            return None
        try:
            return Listener(self.engine)
        except Exception as exc:  # any driver error: polling still works without it
            log.warning("cannot listen for queued work, polling meanwhile: %s", first_line(exc))
            return None

    def dispose(self) -> None:
        if self._direct is not None:
            self._direct.close()
        if "engine" in self.__dict__:
            self.engine.dispose()


#: Errors whose message names the database and what to do already.
_NAMES_THE_DATABASE = (StoreDamaged, StoreFull, StoreLocked, NotDagrunStore)


def _sqlalchemy_errors() -> tuple[type[Exception], ...]:
    """SQLite's errors, and SQLAlchemy's once a process has loaded it (none can be raised
    before)."""
    loaded = sys.modules.get("sqlalchemy.exc")
    return (sqlite3.Error, loaded.SQLAlchemyError) if loaded else (sqlite3.Error,)


def _shown(engine: Engine) -> str:
    return engine.url.render_as_string(hide_password=True)


def table_names(conn: Connection) -> set[str]:
    """The database's tables (SQLite's own list on a direct connection)."""
    if isinstance(conn, DirectConnection):
        return direct.table_names(conn.driver)
    from sqlalchemy import inspect

    return set(inspect(conn).get_table_names())


def refuse_foreign(conn: Connection, database: str) -> None:
    """A database with tables but no ``dagrun_meta`` belongs to another program: dagrun
    writes nothing into it."""
    tables = sorted(table_names(conn))
    if tables:
        shown = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "")
        raise NotDagrunStore(database, f"holds another program's tables ({shown})")


def _create_statements(dialect) -> list[str]:
    """The new schema's DDL, as an earlier process rendered it (``rendered``) or now."""
    from dagrun.store import schema

    return rendered.kept(dialect.name, _SCHEMA_DDL, lambda: schema.create_statements(dialect))


_SCHEMA_DDL = f"schema version {SCHEMA_VERSION}"
_SHARED: dict[str, Store] = {}


def shared_store(url: str | None) -> Store:
    """One store per database per process, opened without touching the schema: what a
    worker child's attempts use (fenced partition writes, a file's last good source,
    variables). None means this process's own database (``DAGRUN_DB_URL``, or the
    default), its schema made or brought up to date on first use: what ``Variable`` and
    ``Connection`` read outside an attempt."""
    create = url is None
    url = store_url(url)
    store = _SHARED.get(url)
    if store is None:
        store = _SHARED[url] = Store(url, create=create, direct=True)
    return store


class Listener:
    """An autocommit connection LISTENing on ``WORK_CHANNEL``; poll its ``fileno``."""

    def __init__(self, engine: Engine) -> None:
        import psycopg

        args, kwargs = engine.dialect.create_connect_args(engine.url)
        kwargs = {**PG_CONNECT_ARGS, **kwargs, "autocommit": True}
        self._conn = psycopg.connect(*args, **kwargs)
        self._conn.execute(f"LISTEN {WORK_CHANNEL}")

    def fileno(self) -> int:
        return self._conn.fileno()

    def heard(self) -> bool:
        """Take the notifications that arrived, without waiting; whether there were any."""
        return any(True for _ in self._conn.notifies(timeout=0))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._conn.close()


def _migrate(conn: Connection, version: int) -> None:
    """Apply every step after ``version``, then record the new version (one transaction).

    A step may rebuild a table on SQLite, which cannot drop a constraint: the schema
    transaction runs with foreign keys off there (dropping the old table would otherwise
    cascade to the rows that reference it), so they are checked before the commit."""
    from sqlalchemy import text

    from dagrun.store import migrations, schema

    for step in range(version + 1, SCHEMA_VERSION + 1):
        for statement in migrations.migration(step, conn.dialect.name):
            conn.execute(text(statement))
    if conn.dialect.name == "sqlite" and conn.exec_driver_sql("PRAGMA foreign_key_check").first():
        raise StoreError("the migration would break references between rows; nothing changed")
    conn.execute(
        schema.meta.update()
        .where(schema.meta.c.key == "schema_version")
        .values(value=str(SCHEMA_VERSION))
    )

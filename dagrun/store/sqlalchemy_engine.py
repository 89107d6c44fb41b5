"""SQLAlchemy's engine of a store: how it connects to SQLite and PostgreSQL, and what it
does to each connection and transaction (SQLite's pragmas and ``BEGIN IMMEDIATE``,
PostgreSQL's timeouts and keepalives). A store makes one only to create or migrate a
schema, or where a caller runs SQLAlchemy on its connections (``engine.Store``).
"""

from __future__ import annotations

import functools
import os
import weakref
from pathlib import Path
from typing import TYPE_CHECKING

from dagrun import settings
from dagrun.errors import StoreError, StoreFolderMissing, UsageError
from dagrun.store import direct, sql
from dagrun.store.location import dagrun_home

if TYPE_CHECKING:
    from sqlalchemy import Connection, Engine

#: ``BEGIN`` and ``BEGIN IMMEDIATE`` (``queries/engine.py``).
_Q = sql.Catalogue("dagrun.store.queries.engine", "engine.")

_ENGINES: weakref.WeakSet[Engine] = weakref.WeakSet()

#: WAL with NORMAL is always consistent and survives any process crash; only an OS crash or
#: power cut can roll back the last commits, which every dagrun transition tolerates (a task
#: that ran again rewrites the same partition). FULL adds an fsync per commit.
SQLITE_SYNCHRONOUS: str = settings.get("database.sqlite_synchronous").upper()


def _dispose_after_fork() -> None:
    """A forked child must never reuse its parent's connections (it would corrupt them)."""
    for engine in list(_ENGINES):
        engine.dispose(close=False)


os.register_at_fork(after_in_child=_dispose_after_fork)


#: What to install for a URL's driver (SQLAlchemy's default driver of each backend).
_DRIVER_PACKAGES = {
    "postgresql": "'dagrun[postgres]'",
    "mysql": "mysqlclient",
    "mysql+pymysql": "pymysql",
    "mariadb": "mariadb",
    "mssql": "pyodbc",
    "oracle": "oracledb",
}


def _missing_driver(parsed, exc: Exception) -> str:
    """One line naming what to install; dagrun is tested on SQLite and PostgreSQL only."""
    package = _DRIVER_PACKAGES.get(parsed.drivername) or _DRIVER_PACKAGES.get(
        parsed.get_backend_name()
    )
    if package is None:
        return f"--db {parsed.drivername}:// is not supported by this install ({exc})"
    return f"--db {parsed.drivername}:// needs a driver this install lacks: pip install {package}"


#: A connection attempt gives up after this long, and a dead peer is noticed by TCP
#: keepalives, so an outage is seen as an error, never as a hang.
PG_CONNECT_ARGS = {
    "connect_timeout": 10,
    "keepalives": 1,
    "keepalives_idle": 15,
    "keepalives_interval": 5,
    "keepalives_count": 3,
}


#: A dagrun transaction lasts milliseconds. One left open this long belongs to a process
#: that was paused (or hung) inside it: PostgreSQL ends it, so the row locks it holds stop
#: blocking every other worker; the paused process finds its transaction gone and retries.
IDLE_IN_TRANSACTION_MS: int = settings.get("database.pg_idle_in_transaction_ms")


def _connect_args(parsed) -> dict[str, object]:
    """PostgreSQL's timeouts and keepalives, unless the URL sets its own; the session
    setting is added to the URL's own ``options``."""
    if parsed.get_backend_name() != "postgresql":
        return {}
    args: dict[str, object] = {k: v for k, v in PG_CONNECT_ARGS.items() if k not in parsed.query}
    options = parsed.query.get("options", "")
    if "idle_in_transaction_session_timeout" not in options:
        setting = f"-c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_MS}"
        args["options"] = f"{options} {setting}".strip()
    return args


def make_engine(url: str, only_home_folder: bool) -> Engine:
    """The engine of ``url``, told of every fork (a child never reuses its connections)."""
    engine = _new_engine(url, only_home_folder)
    _ENGINES.add(engine)
    return engine


def _new_engine(url: str, only_home_folder: bool) -> Engine:
    from sqlalchemy import create_engine, event
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        parsed = make_url(url)
    except ArgumentError:
        raise UsageError(
            f"--db {url!r} is not a database URL (e.g. sqlite:////path/dagrun.db or "
            "postgresql://user@host:5432/db)"
        ) from None
    if parsed.get_backend_name() != "sqlite":
        try:
            return create_engine(
                url,
                pool_pre_ping=True,
                pool_size=5,
                max_overflow=5,
                connect_args=_connect_args(parsed),
            )
        except (NoSuchModuleError, ModuleNotFoundError) as exc:
            raise UsageError(_missing_driver(parsed, exc)) from None
    database = parsed.database
    if database and database != ":memory:":
        sqlite_folder(url, Path(database).absolute().parent, only_home_folder)
    # How long a writer waits for another's write lock before it gives up (StoreLocked):
    # writers hold it for milliseconds, so only a stuck process makes another wait this long.
    busy = settings.get("database.sqlite_busy_seconds")
    engine = create_engine(url, connect_args={"timeout": busy})
    event.listen(engine, "connect", functools.partial(_sqlite_connect, busy_seconds=busy))
    event.listen(engine, "begin", _sqlite_begin)
    return engine


def sqlite_folder(url: str, folder: Path, only_home_folder: bool) -> None:
    """Make a SQLite file's folder. A folder the command line names outside ``DAGRUN_HOME``
    (whose own folder the default store makes) is more likely a typo to report than a
    folder to make."""
    if folder.is_dir():
        return
    home = dagrun_home()
    if only_home_folder and folder != home and home not in folder.parents:
        raise StoreFolderMissing(url, str(folder))
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"cannot create the SQLite folder {folder}: {exc}") from exc


def _sqlite_connect(dbapi_conn, _record, *, busy_seconds: float) -> None:
    direct.set_up(dbapi_conn, busy_seconds=busy_seconds, synchronous=SQLITE_SYNCHRONOUS)


def total_changes(conn: Connection) -> int | None:
    """SQLite's count of rows this connection has changed, to tell a transaction that wrote
    from one that only read; None elsewhere (a PostgreSQL write counts as one that wrote)."""
    raw = conn.connection.dbapi_connection
    return getattr(raw, "total_changes", None)


def foreign_keys_back_on(conn: Connection) -> None:
    """After a schema transaction (foreign keys off, see ``_migrate``): on again, which
    SQLite only allows between transactions. A connection where that fails is dropped, never
    reused without them; keeping the others spares closing the database's last connection,
    which checkpoints its log."""
    try:
        raw = conn.connection.dbapi_connection
        assert raw is not None  # the connection is open: it just ran the transaction
        raw.execute("PRAGMA foreign_keys=ON")
        if raw.execute("PRAGMA foreign_keys").fetchone()[0] == 1:
            return
    except Exception:  # any failure: the connection is dropped below
        pass
    conn.invalidate()


def _sqlite_begin(conn: Connection) -> None:
    """Open SQLite's transaction: ``BEGIN IMMEDIATE`` for a writer. Run on the driver's
    cursor (``sql``), as every statement of a group commit is: it begins every one."""
    options = conn.get_execution_options()
    if options.get("dagrun_schema"):  # see ``_migrate``; only before a transaction begins
        conn.exec_driver_sql("PRAGMA foreign_keys=OFF")
    sql.execute(conn, _Q.BEGIN_WRITE if options.get("dagrun_write") else _Q.BEGIN_READ)

"""Whether the database is sound (``dagrun db check``), and a copy of it to restore from
(``dagrun db backup``).

SQLite finds damage only where a statement reads it, so a command that reads other pages
works on while one that reads the damaged ones fails (``StoreDamaged``). The check reads
everything: SQLite's ``quick_check`` walks every page of every table and index, then every
row of every table is read, which finds what ``quick_check`` does not look at (a text value
that is no longer UTF-8). On PostgreSQL every table is read in full, every value of every
row included, which is where a damaged page or TOAST value shows.

The copy uses SQLite's backup API inside one read transaction: the copy is the database as
it was when the transaction began, writers go on meanwhile (WAL), and the copy is checked
before it takes the name asked for.
"""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from dagrun.errors import NotDagrunStore, StoreDamaged, StoreError, UsageError
from dagrun.store import schema
from dagrun.store.direct import driver_of
from dagrun.store.engine import Store, refuse_foreign, table_names
from dagrun.store.outage import driver_errors

if TYPE_CHECKING:
    from sqlalchemy import Connection

#: ``quick_check`` stops after this many problems: enough to name the damage.
QUICK_CHECK_LIMIT = 20
#: Pages copied per step of a backup (4 MiB of 4 KiB pages): the progress's grain.
BACKUP_STEP_PAGES = 1024


@dataclass
class Checkup:
    """What ``check`` found: the schema version, how much it read, and the damage; or why
    it could not check (``refused``: no database, not dagrun's, newer, unreachable)."""

    database: str
    version: int | None = None
    tables: int = 0
    rows: int = 0
    damage: list[str] = field(default_factory=list)
    refused: str | None = None

    @property
    def ok(self) -> bool:
        return not self.damage and self.refused is None


def check(store: Store) -> Checkup:
    """Check ``store`` (opened without ``ensure_schema``: a check writes nothing): it
    answers, its schema is dagrun's and not newer than this dagrun's, its pages are sound
    (SQLite) and every row of every table reads."""
    found = Checkup(store.where)
    if store.dialect == "sqlite" and not Path(store.where).exists():
        found.refused = f"there is no database at {store.where} (`dagrun db init` makes one)"
        return found
    try:
        with store.read() as conn:
            tables = _dagrun_tables(store, conn, found)
    except StoreDamaged as exc:
        found.damage.append(exc.detail)
        return found
    except StoreError as exc:
        found.refused = str(exc)
    if found.refused is not None:
        return found
    if store.dialect == "sqlite":
        try:
            found.damage += _quick_check(store)
        except StoreDamaged as exc:
            found.damage.append(exc.detail)
    for table in tables:
        try:
            found.rows += _read_table(store, table, found.damage)
        except StoreDamaged as exc:
            found.damage.append(f"table {table}: {exc.detail}")
        except StoreError as exc:  # PostgreSQL's internal_error of a lost TOAST chunk...
            found.damage.append(f"table {table}: {exc}")
        found.tables += 1
    return found


def _dagrun_tables(store: Store, conn: Connection, found: Checkup) -> list[str]:
    """dagrun's tables present in the database, after its schema version is read into
    ``found``; none, with ``found.refused`` said, when the database is not dagrun's or is
    newer than this dagrun."""
    present = table_names(conn)
    if schema.meta.name not in present:
        try:
            refuse_foreign(conn, found.database)
        except NotDagrunStore as exc:
            found.refused = str(exc)
            return []
        found.refused = f"{found.database} has no dagrun schema (`dagrun db init` makes it)"
        return []
    found.version = store.schema_version(conn)
    if found.version > schema.SCHEMA_VERSION:
        found.refused = (
            f"{found.database} has schema version {found.version}, newer than this dagrun "
            f"({schema.SCHEMA_VERSION}); upgrade dagrun"
        )
        return []
    return [t.name for t in schema.metadata.sorted_tables if t.name in present]


_PAGE = re.compile(r"\bpage (\d+)")


def _quick_check(store: Store) -> list[str]:
    """SQLite's ``quick_check``: each problem it finds, named by the tables and indexes of
    the pages it names."""
    with store.read() as conn:
        quick_check = f"PRAGMA quick_check({QUICK_CHECK_LIMIT})"
        rows = [r[0] for r in driver_of(conn).execute(quick_check)]
        if rows == ["ok"]:
            return []
        owners = _page_owners(conn)
    lines = [line for row in rows for line in row.splitlines()]
    return [_named(line, owners) for line in lines if not line.startswith("*** in database")]


def _page_owners(conn: Connection) -> dict[int, str]:
    """Page number -> the table or index it belongs to: every page where SQLite can list
    them (``dbstat``), else the root pages alone."""
    for query in ("SELECT pageno, name FROM dbstat", "SELECT rootpage, name FROM sqlite_schema"):
        try:
            return dict(driver_of(conn).execute(query).fetchall())
        except driver_errors():
            continue
    return {}


def _named(line: str, owners: dict[int, str]) -> str:
    names = sorted({owners[int(n)] for n in _PAGE.findall(line) if int(n) in owners})
    return f"{line} ({', '.join(names)})" if names else line


class _Undecodable(bytes):
    """A stored text value that is not UTF-8, as the check's text factory returns it."""


def _text(value: bytes) -> str | bytes:
    try:
        return value.decode()
    except UnicodeDecodeError:
        return _Undecodable(value)


def _read_table(store: Store, table: str, problems: list[str]) -> int:
    """Read every row of ``table`` in full; the rows read. On SQLite a text value that is
    not UTF-8 is a problem noted (its row and column), not the end of the read."""
    with store.read() as conn:
        if store.dialect != "sqlite":
            return conn.exec_driver_sql(
                f'SELECT count(*), sum(length(x::text)) FROM "{table}" AS x'
            ).scalar_one()
        raw = driver_of(conn)
        raw.text_factory = _text
        try:
            return _scan(raw, table, problems)
        finally:
            raw.text_factory = str


def _scan(raw: sqlite3.Connection, table: str, problems: list[str]) -> int:
    cursor = raw.execute(f'SELECT rowid, * FROM "{table}"')
    names = [d[0] for d in cursor.description][1:]
    count = 0
    for row in cursor:
        count += 1
        for name, value in zip(names, row[1:], strict=True):
            if isinstance(value, _Undecodable):
                problems.append(
                    f"table {table}, row {row[0]}: column '{name}' holds text that is not UTF-8"
                )
    return count


def backup(
    store: Store,
    target: Path,
    *,
    overwrite: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Copy the SQLite ``store`` to ``target`` while others use it; the pages copied.

    The copy is written beside ``target`` and renamed onto it only once it passes
    ``quick_check``: ``target`` is never a half-made copy. ``progress`` hears (pages copied,
    pages in all) after each step."""
    if store.dialect != "sqlite":
        raise UsageError(
            "db backup copies a SQLite database; for PostgreSQL use pg_dump "
            "(e.g. pg_dump -Fc DBNAME > dagrun.dump)"
        )
    target = target.absolute()
    _check_target(store, target, overwrite)
    partial = target.with_name(f".{target.name}.partial")
    partial.unlink(missing_ok=True)
    try:
        pages = _copy(store, partial, progress)
        _check_copy(store, partial)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return pages


def _check_target(store: Store, target: Path, overwrite: bool) -> None:
    if not target.parent.is_dir():
        raise UsageError(f"cannot write {target}: the folder {target.parent} does not exist")
    if target == Path(store.where).absolute():
        raise UsageError(f"{target} is the database itself: name another file")
    if target.exists() and not overwrite:
        raise UsageError(f"{target} exists: pass --overwrite to replace it")


def _copy(store: Store, partial: Path, progress: Callable[[int, int], None] | None) -> int:
    """Copy every page inside one read transaction of the store (its first read pins the
    snapshot), so writers neither restart the copy nor change what it holds."""
    total = 0

    def step(_status: int, remaining: int, pages: int) -> None:
        nonlocal total
        total = pages
        if progress is not None:
            progress(pages - remaining, pages)

    with store.read() as conn:
        raw = driver_of(conn)
        raw.execute("SELECT count(*) FROM sqlite_schema").fetchone()
        copy = sqlite3.connect(partial)
        try:
            raw.backup(copy, pages=BACKUP_STEP_PAGES, progress=step)
            copy.execute("PRAGMA journal_mode=DELETE")
        finally:
            copy.close()
    return total


def _check_copy(store: Store, partial: Path) -> None:
    copy = sqlite3.connect(partial)
    try:
        lines = [r[0] for r in copy.execute(f"PRAGMA quick_check({QUICK_CHECK_LIMIT})")]
    except sqlite3.DatabaseError as exc:
        lines = [str(exc)]
    finally:
        copy.close()
    if lines != ["ok"]:
        raise StoreDamaged(
            store.where,
            f"its copy fails quick_check: {lines[0]}",
            "restore it from an earlier copy made by `dagrun db backup`",
        )

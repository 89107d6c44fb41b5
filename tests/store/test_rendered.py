"""SQL rendered once per installation (dagrun.store.rendered): a later process runs exactly
what it would have compiled, a changed source or a bad file renders afresh, and a new
database gets the schema ``metadata.create_all`` makes."""

from __future__ import annotations

import os
import pickle
import sqlite3
import sys
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect

from dagrun.store import Store, conversions, rendered, schema, sql, statements
from tests.store import store_statements


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty folder for rendered SQL, written even where bytecode is not."""
    folder = tmp_path / "rendered"
    monkeypatch.setattr(rendered, "DIRECTORY", folder)
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    rendered.forget()
    yield folder
    rendered.forget()


def fresh(statement: sql.Statement) -> sql.Statement:
    """The same catalogue entry, as a process that has not rendered it yet holds it."""
    copy = sql.Statement(statement.purpose, statement._sql)
    copy.name = statement.name
    return copy


#: Values of each conversion as Python holds them, and as each driver returns them.
SAMPLES = {
    conversions.INSTANT: [
        datetime(2026, 3, 29, 0, 30, tzinfo=UTC),
        datetime(2026, 1, 1, 9, 5, 7, 1, tzinfo=timezone(timedelta(hours=-5))),
    ],
    conversions.DATETIME: [datetime(2026, 3, 29, 0, 30, 1, 250)],
    conversions.BOOLEAN: [True, False, 1, 0],
    conversions.FLOAT: [1.5, 3, 0.0],
}
DRIVER_VALUES = {
    ("sqlite", conversions.INSTANT): ["2026-03-29 00:30:00.000000", "2026-03-29 00:30:00"],
    ("sqlite", conversions.DATETIME): ["2026-03-29 00:30:00.000250"],
    ("sqlite", conversions.BOOLEAN): [1, 0],
    ("sqlite", conversions.FLOAT): [1.5, 2.0],
    ("postgresql", conversions.INSTANT): [
        datetime(2026, 3, 29, 1, 30, tzinfo=timezone(timedelta(hours=1)))
    ],
    ("postgresql", conversions.DATETIME): [datetime(2026, 3, 29, 1, 30, tzinfo=UTC)],
    ("postgresql", conversions.BOOLEAN): [True, False],
    ("postgresql", conversions.FLOAT): [1.5, Decimal("2.25")],
}


@pytest.mark.parametrize("name", ["sqlite", "postgresql"])
def test_every_statement_runs_as_compiled_after_a_round_trip_through_the_file(cache, name):
    """What a later process reads back renders the same SQL, and converts every bind and
    every column exactly as SQLAlchemy's own processors do (on values of each type), for
    every statement of the store: a process that never imports SQLAlchemy runs the same
    SQL on the same values and reads the same rows."""
    every = [statement for _, statement in store_statements().values()]
    assert set(statements.CATALOGUE.values()) <= set(every)
    for statement in every:
        rendered.put(name, statement.name, sql.Layout.of(statement.expression(name), name))
    rendered.save()
    rendered.forget()
    d = sql.sqlalchemy_dialect(name)
    for statement in every:
        layout = rendered.get(name, statement.name)
        expression = statement.expression(name)
        assert layout == sql.Layout.of(expression, name), statement.name
        compiled = expression.compile(dialect=d)
        binds = {bind_name: bind for bind, bind_name in compiled.bind_names.items()}
        for bind_name, kind in layout.bind_kinds:
            processor = binds[bind_name].type.dialect_impl(d).bind_processor(d)
            ours = conversions.bind(name, kind)
            for value in SAMPLES[kind]:
                assert _apply(ours, value) == _apply(processor, value), statement.name
        columns = list(getattr(expression, "exported_columns", ()) or ())
        assert len(columns) == len(layout.column_kinds), statement.name
        for column, kind in zip(columns, layout.column_kinds, strict=True):
            _same_reading(name, d, column.type, kind, statement.name)


def _apply(conversion, value):
    return conversion(value) if conversion else value


def _same_reading(name: str, d, kind_type, kind: str | None, what: str) -> None:
    """Our result conversion of ``kind`` reads each driver value as SQLAlchemy does."""
    impl = kind_type.dialect_impl(d)
    codes = [1700, 701] if kind == conversions.FLOAT and name == "postgresql" else [None]
    ours = conversions.result(name, kind)
    for value in DRIVER_VALUES.get((name, kind), []) if kind else []:
        for code in codes:
            processor = impl.result_processor(d, code)
            assert _apply(ours, value) == _apply(processor, value), what
    if kind is None and name == "sqlite":
        assert impl.result_processor(d, None) is None, what


def test_a_later_process_renders_nothing_it_finds_in_the_file(cache, monkeypatch):
    statement = fresh(statements.CLAIM)
    first = statement.prepared("sqlite")
    rendered.save()
    rendered.forget()
    assert [p.name for p in cache.iterdir()] == [f"rendered-sqlite-{rendered.fingerprint()}.pickle"]

    def no_compiler(*_args):
        raise AssertionError("compiled again")

    monkeypatch.setattr(sql.Layout, "of", no_compiler)
    again = fresh(statements.CLAIM).prepared("sqlite")
    assert (again.sql, again.order, again.expanding) == (first.sql, first.order, first.expanding)


def test_a_damaged_file_is_rendered_afresh_and_replaced(cache):
    cache.mkdir()
    path = cache / f"rendered-sqlite-{rendered.fingerprint()}.pickle"
    path.write_bytes(b"not a pickle")
    prepared = fresh(statements.QUEUE_TASK).prepared("sqlite")
    assert "UPDATE task_instance" in prepared.sql
    rendered.save()
    with path.open("rb") as file:
        assert set(pickle.load(file)) == {"queue_task"}


def test_nothing_is_written_where_python_writes_no_bytecode(cache, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    fresh(statements.QUEUE_TASK).prepared("sqlite")
    rendered.save()
    assert not cache.exists()


def test_files_of_an_older_fingerprint_are_removed(cache):
    cache.mkdir()
    old = cache / "rendered-sqlite-0123456789abcdef0123.pickle"
    old.write_bytes(pickle.dumps({}))
    fresh(statements.QUEUE_TASK).prepared("sqlite")
    rendered.save()
    assert not old.exists() and len(list(cache.iterdir())) == 1


def test_the_fingerprint_changes_with_any_source_file(tmp_path: Path):
    (tmp_path / "store").mkdir()
    module = tmp_path / "store" / "a.py"
    module.write_text("x = 1\n")
    (tmp_path / "b.py").write_text("y = 2\n")
    before = rendered.fingerprint_of(str(tmp_path))
    assert rendered.fingerprint_of(str(tmp_path)) == before
    module.write_text("x = 10\n")
    assert rendered.fingerprint_of(str(tmp_path)) != before
    changed = rendered.fingerprint_of(str(tmp_path))
    stat = module.stat()
    os.utime(module, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert rendered.fingerprint_of(str(tmp_path)) != changed


@pytest.mark.slow
def test_a_new_database_gets_the_schema_create_all_makes(db_url: str, tmp_path: Path, cache):
    """The rendered DDL (what a new database is made with) against SQLAlchemy's own
    ``create_all``: the same tables, columns, indexes and partial indexes."""
    store = Store(db_url)
    try:
        made = _shape(store.engine)
        with store.read() as conn:
            assert store.schema_version(conn) == schema.SCHEMA_VERSION
            if store.dialect == "sqlite":
                keys = conn.exec_driver_sql("PRAGMA foreign_keys").scalar()
                assert keys == 1  # on again on the connection that made the schema
    finally:
        store.dispose()
    if store.dialect == "sqlite":
        reference = create_engine(f"sqlite:///{tmp_path / 'reference.db'}")
        schema.metadata.create_all(reference)
        assert made == _shape(reference)
        assert _sqlite_master(db_url) == _sqlite_master(str(reference.url))
    else:
        tables = {t.name for t in schema.metadata.sorted_tables}
        assert set(made) == tables
        for table in schema.metadata.sorted_tables:
            assert made[table.name][0] == [c.name for c in table.columns]


def _shape(engine) -> dict[str, tuple[list[str], list[str]]]:
    found = inspect(engine)
    return {
        table: (
            [c["name"] for c in found.get_columns(table)],
            sorted(i["name"] for i in found.get_indexes(table)),
        )
        for table in found.get_table_names()
    }


def _sqlite_master(url: str) -> list[tuple]:
    path = url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as conn:
        return conn.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name"
        ).fetchall()

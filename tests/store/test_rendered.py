"""SQL rendered once per installation (dagrun.store.rendered): a later process runs exactly
what it would have compiled, a changed source or a bad file renders afresh, and a new
database gets the schema ``metadata.create_all`` makes."""

from __future__ import annotations

import os
import pickle
import sqlite3
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect

from dagrun.store import Store, rendered, schema, sql, statements
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


def dialect(name: str):
    from sqlalchemy.dialects import postgresql, sqlite

    return (sqlite if name == "sqlite" else postgresql).dialect()


def fresh(statement: sql.Statement) -> sql.Statement:
    """The same catalogue entry, as a process that has not rendered it yet holds it."""
    copy = sql.Statement(statement.purpose, statement._sql)
    copy.name = statement.name
    return copy


@pytest.mark.parametrize("name", ["sqlite", "postgresql"])
def test_every_statement_runs_as_compiled_after_a_round_trip_through_the_file(cache, name):
    """What a later process reads back renders the same SQL, binds its values the same
    way and reads its rows into the same types, for every statement of the store: the
    catalogue's, the reads' and those beside their own modules."""
    d = dialect(name)
    every = [statement for _, statement in store_statements().values()]
    assert set(statements.CATALOGUE.values()) <= set(every)
    for statement in every:
        rendered.put(name, statement.name, sql.Layout.of(statement.expression(name), d))
    rendered.save()
    rendered.forget()
    for statement in every:
        layout = rendered.get(name, statement.name)
        compiled = sql.Layout.of(statement.expression(name), d)
        assert layout is not None, statement.name
        assert layout[:5] == compiled[:5], statement.name
        assert layout.columns == compiled.columns, statement.name
        kinds = [(n, repr(k)) for n, k in layout.bind_types]
        assert kinds == [(n, repr(k)) for n, k in compiled.bind_types], statement.name
        assert list(map(repr, layout.column_types)) == list(map(repr, compiled.column_types))
        again, now = sql.Prepared(layout, d), sql.Prepared(compiled, d)
        assert [n for n, _ in again.processors] == [n for n, _ in now.processors]


def test_a_later_process_renders_nothing_it_finds_in_the_file(cache, monkeypatch):
    statement = fresh(statements.CLAIM)
    first = statement.prepared(dialect("sqlite"))
    rendered.save()
    rendered.forget()
    assert [p.name for p in cache.iterdir()] == [f"rendered-sqlite-{rendered.fingerprint()}.pickle"]

    def no_compiler(*_args):
        raise AssertionError("compiled again")

    monkeypatch.setattr(sql.Layout, "of", no_compiler)
    again = fresh(statements.CLAIM).prepared(dialect("sqlite"))
    assert (again.sql, again.order, again.expanding) == (first.sql, first.order, first.expanding)


def test_a_damaged_file_is_rendered_afresh_and_replaced(cache):
    cache.mkdir()
    path = cache / f"rendered-sqlite-{rendered.fingerprint()}.pickle"
    path.write_bytes(b"not a pickle")
    prepared = fresh(statements.QUEUE_TASK).prepared(dialect("sqlite"))
    assert "UPDATE task_instance" in prepared.sql
    rendered.save()
    with path.open("rb") as file:
        assert set(pickle.load(file)) == {"queue_task"}


def test_nothing_is_written_where_python_writes_no_bytecode(cache, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    fresh(statements.QUEUE_TASK).prepared(dialect("sqlite"))
    rendered.save()
    assert not cache.exists()


def test_files_of_an_older_fingerprint_are_removed(cache):
    cache.mkdir()
    old = cache / "rendered-sqlite-0123456789abcdef0123.pickle"
    old.write_bytes(pickle.dumps({}))
    fresh(statements.QUEUE_TASK).prepared(dialect("sqlite"))
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

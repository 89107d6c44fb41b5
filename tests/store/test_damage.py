"""A damaged, full, locked or foreign database is a typed ``StoreError`` naming the file and
what to do, made from real SQLite states: damaged pages and values, ``max_page_count`` for a
full disk, a held write lock; a full disk is an outage only a write ends."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest
from sqlalchemy import create_engine, event, insert, inspect, select
from sqlalchemy.exc import OperationalError

from dagrun.errors import (
    NotDagrunStore,
    OutageTooLong,
    StoreDamaged,
    StoreFolderMissing,
    StoreFull,
    StoreLocked,
    StoreUnavailable,
)
from dagrun.store import Store
from dagrun.store.location import normalise_url
from dagrun.store.outage import Health, note_failure, ride_out, translate
from dagrun.store.schema import audit_log, variable
from tests.helpers import overwrite_root_page


def file_of(store: Store) -> Path:
    return Path(store.where)


def raw(store: Store) -> sqlite3.Connection:
    """A connection of its own to the store's file, as another program's."""
    store.dispose()
    return sqlite3.connect(file_of(store), isolation_level=None)


def audit_row(store: Store, detail: str = "{}") -> None:
    with store.write() as conn:
        conn.execute(
            insert(audit_log).values(at=store.now(conn), action="test", actor="me", detail=detail)
        )


def test_a_text_value_that_is_not_utf8_is_damage_naming_its_column(sqlite_store):
    audit_row(sqlite_store)
    db = raw(sqlite_store)
    db.execute("UPDATE audit_log SET detail = CAST(x'7b22ff7d' AS TEXT)")
    db.close()
    with pytest.raises(StoreDamaged) as caught, sqlite_store.read() as conn:
        conn.execute(select(audit_log.c.detail)).all()
    message = str(caught.value)
    assert "column 'detail' holds text that is not UTF-8" in message
    assert str(file_of(sqlite_store)) in message and "`dagrun db check`" in message
    assert "`dagrun db backup`" in message


def test_a_stored_instant_that_cannot_be_read_is_damage(sqlite_store):
    audit_row(sqlite_store)
    db = raw(sqlite_store)
    db.execute("UPDATE audit_log SET at = ']026-12-02 07:00:40.077036'")
    db.close()
    damage = pytest.raises(StoreDamaged, match="a stored value cannot be read")
    with damage, sqlite_store.read() as conn:
        conn.execute(select(audit_log.c.at)).all()
    with pytest.raises(ValueError, match="mine"), sqlite_store.read():
        raise ValueError("mine")  # dagrun's own, inside a transaction: not damage


def test_damaged_pages_are_damage(sqlite_store):
    audit_row(sqlite_store)
    sqlite_store.dispose()
    overwrite_root_page(file_of(sqlite_store), "audit_log", b"\xff" * 16)  # its b-tree header
    with pytest.raises(StoreDamaged, match="database disk image is malformed"):
        audit_row(sqlite_store)


def test_an_error_sqlite_words_with_damaged_text_is_damage(sqlite_store):
    db = raw(sqlite_store)
    db.execute("PRAGMA writable_schema=ON")
    db.execute(
        "UPDATE sqlite_schema SET name = CAST(x'76ff' AS TEXT), tbl_name = CAST(x'76ff' AS TEXT),"
        " sql = CAST(x'435245415445205441424c4520ff28' AS TEXT) WHERE name = 'variable'"
    )
    db.close()
    with pytest.raises(StoreDamaged), sqlite_store.read() as conn:
        conn.execute(select(variable)).all()


def test_a_file_that_is_not_sqlite_is_refused(tmp_path):
    path = tmp_path / "notes.db"
    path.write_text("shopping list: " + "milk, " * 40)
    with pytest.raises(NotDagrunStore, match="is not a SQLite database") as caught:
        Store(f"sqlite:///{path}")
    assert str(path) in str(caught.value)
    assert path.read_text().startswith("shopping list")


def test_another_programs_database_is_refused_and_left_alone(db_url):
    other = create_engine(normalise_url(db_url))
    with other.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE notes (x INTEGER)")
    with pytest.raises(NotDagrunStore, match=r"holds another program's tables \(notes\)"):
        Store(db_url)
    with other.connect() as conn:
        assert inspect(conn).get_table_names() == ["notes"]
    other.dispose()


def test_a_held_write_lock_past_the_busy_timeout_is_one_named_error(sqlite_url, monkeypatch):
    monkeypatch.setenv("DAGRUN_SQLITE_BUSY_SECONDS", "0.2")
    store = Store(sqlite_url)
    holder = sqlite3.connect(file_of(store), isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreLocked, match="is locked: another process held it") as caught:
            audit_row(store)
        assert str(file_of(store)) in str(caught.value)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        store.dispose()


def fill(store: Store) -> None:
    """Make the store's file as full as a full disk: no page more (``max_page_count``)."""
    pages = raw(store).execute("PRAGMA page_count").fetchone()[0]

    def no_more_pages(dbapi_conn, _record) -> None:
        dbapi_conn.execute(f"PRAGMA max_page_count={pages}")

    event.listen(store.engine, "connect", no_more_pages)
    store.engine.dispose()


def test_a_full_disk_is_one_error_naming_it_and_loses_nothing(sqlite_store):
    audit_row(sqlite_store, '{"kept": 1}')
    fill(sqlite_store)
    with pytest.raises(StoreFull, match=r"the disk under the database .* is full") as caught:
        for _ in range(200):
            audit_row(sqlite_store, "x" * 2000)
    assert "nothing committed was lost" in str(caught.value)
    with sqlite_store.read() as conn:
        assert '{"kept": 1}' in conn.execute(select(audit_log.c.detail)).scalars().all()


def test_only_a_write_ends_a_full_disk_outage(sqlite_store):
    health = sqlite_store.ride_out_outages(limit=60)
    audit_row(sqlite_store)
    health.failed(StoreFull(sqlite_store.where, "database or disk is full"))
    with sqlite_store.read() as conn:
        conn.execute(select(audit_log)).all()
    with sqlite_store.write():
        pass  # a write transaction that changed nothing
    assert health.down
    audit_row(sqlite_store)
    assert not health.down


def test_a_full_disk_ends_a_long_running_loop_whose_reads_still_answer(sqlite_store):
    health = sqlite_store.ride_out_outages(limit=0.3)
    fill(sqlite_store)
    stopped, failed, turns = threading.Event(), [], [0]

    def turn() -> float:
        turns[0] += 1
        if turns[0] % 2:
            for _ in range(200):
                audit_row(sqlite_store, "x" * 2000)
        with sqlite_store.read() as conn:
            conn.execute(select(audit_log.c.id)).all()
        return 0.01

    deadline = threading.Timer(10, stopped.set)
    deadline.start()
    ride_out(turn, stopped, failed.append, health=health, what="t")
    deadline.cancel()
    assert len(failed) == 1 and isinstance(failed[0], OutageTooLong), failed
    assert str(failed[0]).startswith(f"the disk under the database {sqlite_store.where} is full")
    assert "gave up after" in str(failed[0]) and "DAGRUN_DB_OUTAGE_SECONDS=0.3" in str(failed[0])


def test_damage_is_not_waited_out():
    damage = StoreDamaged("/x.db", "database disk image is malformed", "restore it")
    with pytest.raises(StoreDamaged):
        note_failure(Health(limit=60), damage, "group commit")


class PgError(Exception):
    def __init__(self, sqlstate: str) -> None:
        super().__init__(f"SQLSTATE {sqlstate}")
        self.sqlstate = sqlstate


@pytest.mark.parametrize(
    ("sqlstate", "kind"),
    [("53100", StoreFull), ("XX001", StoreDamaged), ("08006", StoreUnavailable)],
)
def test_postgresql_states_of_a_full_disk_and_of_damage(sqlstate, kind):
    url = "postgresql+psycopg://u:secret@db.example/dagrun"
    error = translate(OperationalError("SELECT 1", {}, PgError(sqlstate)), url)
    assert type(error) is kind
    assert "secret" not in str(error)


def test_the_command_line_makes_no_folder_outside_dagrun_home(tmp_path, monkeypatch):
    monkeypatch.setenv("DAGRUN_HOME", str(tmp_path / "home"))
    typo = tmp_path / "no" / "such"
    with pytest.raises(StoreFolderMissing, match=f"the folder {typo} does not exist"):
        Store(f"sqlite:///{typo}/x.db", only_home_folder=True)
    assert not (tmp_path / "no").exists()
    Store(f"sqlite:///{tmp_path / 'home' / 'dagrun.db'}", only_home_folder=True).dispose()
    assert (tmp_path / "home" / "dagrun.db").exists()

"""``integrity.check`` (``dagrun db check``) finds real damage and names it; ``backup``
(``dagrun db backup``) copies a SQLite store while a writer commits."""

from __future__ import annotations

import sqlite3
import threading
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import func, insert, select, update

from dagrun.errors import StoreDamaged, UsageError
from dagrun.store import Store, integrity
from dagrun.store.retention import cutoff_in
from dagrun.store.schema import SCHEMA_VERSION, audit_log, meta, metadata
from tests.helpers import overwrite_root_page, wait_until


def audit_rows(store: Store, count: int, detail: str = "{}") -> None:
    with store.write() as conn:
        now = store.now(conn)
        conn.execute(insert(audit_log), [{"at": now, "action": "t", "detail": detail}] * count)


def test_a_sound_store_is_ok_and_every_table_is_read(store):
    audit_rows(store, 3)
    found = integrity.check(store)
    assert found.ok, (found.damage, found.refused)
    assert found.version == SCHEMA_VERSION
    assert found.tables == len(metadata.tables)
    assert found.rows >= 4  # the audit rows and the schema version


def test_damaged_pages_are_named_by_their_table(sqlite_store):
    audit_rows(sqlite_store, 200, "x" * 200)
    sqlite_store.dispose()
    # garbage over the cell pointers of the root page
    overwrite_root_page(Path(sqlite_store.where), "audit_log", b"\x00\x07" * 8, offset=12)
    found = integrity.check(sqlite_store)
    assert not found.ok and found.refused is None
    assert any("audit_log" in line for line in found.damage), found.damage


def test_text_that_is_not_utf8_is_named_by_table_row_and_column(sqlite_store):
    audit_rows(sqlite_store, 2)
    sqlite_store.dispose()
    db = sqlite3.connect(sqlite_store.where)
    db.execute("UPDATE audit_log SET detail = CAST(x'7bff7d' AS TEXT) WHERE id = 2")
    db.commit()
    db.close()
    found = integrity.check(sqlite_store)
    assert found.damage == ["table audit_log, row 2: column 'detail' holds text that is not UTF-8"]
    assert found.rows >= 2  # the read went on past it


def test_a_newer_schema_a_foreign_file_and_no_file_are_refused(tmp_path, store):
    with store.write() as conn:
        conn.execute(update(meta).values(value=str(SCHEMA_VERSION + 1)))
    assert "newer than this dagrun" in (integrity.check(store).refused or "")
    other = tmp_path / "other.db"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE notes (x)")
    db.close()
    refused = integrity.check(Store(f"sqlite:///{other}", create=False)).refused or ""
    assert "holds another program's tables (notes)" in refused
    missing = tmp_path / "missing.db"
    assert "there is no database" in (
        integrity.check(Store(f"sqlite:///{missing}", create=False)).refused or ""
    )
    assert not missing.exists()


def test_a_backup_while_a_writer_commits_is_a_sound_copy(sqlite_store, tmp_path, monkeypatch):
    monkeypatch.setattr(integrity, "BACKUP_STEP_PAGES", 8)  # many steps, writes in between
    audit_rows(sqlite_store, 3000, "y" * 300)
    stop, written = threading.Event(), [0]

    def writer() -> None:
        while not stop.is_set():
            audit_rows(sqlite_store, 20, "z" * 300)
            written[0] += 20

    thread = threading.Thread(target=writer)
    thread.start()
    steps: list[tuple[int, int]] = []

    def progress(copied: int, total: int) -> None:
        if not steps:  # a commit lands between two steps of the copy
            before = written[0]
            wait_until(lambda: written[0] > before, 10, what="a commit during the copy")
        steps.append((copied, total))

    try:
        pages = integrity.backup(sqlite_store, tmp_path / "copy.db", progress=progress)
    finally:
        stop.set()
        thread.join(30)
    assert written[0] > 0 and len(steps) > 10
    assert steps[-1] == (pages, pages)
    copy = sqlite3.connect(tmp_path / "copy.db")
    assert copy.execute("PRAGMA quick_check").fetchall() == [("ok",)]
    copied = copy.execute("SELECT count(*) FROM audit_log").fetchone()[0]
    copy.close()
    assert 3000 <= copied <= 3000 + written[0] and copied % 20 == 0  # whole transactions
    restored = Store(f"sqlite:///{tmp_path / 'copy.db'}")
    with restored.read() as conn:
        assert conn.execute(select(func.count()).select_from(audit_log)).scalar() == copied
    restored.dispose()
    assert not list(tmp_path.glob(".copy.db.partial*"))


def test_a_backup_keeps_an_existing_file_unless_told(sqlite_store, tmp_path):
    target = tmp_path / "copy.db"
    target.write_text("an older copy")
    with pytest.raises(UsageError, match="exists: pass --overwrite"):
        integrity.backup(sqlite_store, target)
    assert target.read_text() == "an older copy"
    integrity.backup(sqlite_store, target, overwrite=True)
    assert sqlite3.connect(target).execute("PRAGMA quick_check").fetchone() == ("ok",)
    with pytest.raises(UsageError, match="is the database itself"):
        integrity.backup(sqlite_store, Path(sqlite_store.where), overwrite=True)


def test_a_backup_of_a_damaged_store_is_refused(sqlite_store, tmp_path):
    audit_rows(sqlite_store, 200, "x" * 200)
    sqlite_store.dispose()
    # garbage over the cell pointers of the root page
    overwrite_root_page(Path(sqlite_store.where), "audit_log", b"\x00\x07" * 8, offset=12)
    with pytest.raises(StoreDamaged, match="its copy fails quick_check"):
        integrity.backup(sqlite_store, tmp_path / "copy.db")
    assert not (tmp_path / "copy.db").exists()


def test_postgresql_is_backed_up_with_pg_dump(pg_url, tmp_path):
    store = Store(pg_url)
    with pytest.raises(UsageError, match="pg_dump"):
        integrity.backup(store, tmp_path / "copy.db")
    store.dispose()


def test_a_cutoff_without_an_offset_is_wall_clock_time_in_each_zone():
    day = datetime(2026, 1, 5)
    assert cutoff_in(day, "Asia/Tokyo") == datetime(2026, 1, 4, 15, tzinfo=UTC)
    assert cutoff_in(day, "UTC") == datetime(2026, 1, 5, tzinfo=UTC)
    given = datetime(2026, 1, 5, tzinfo=ZoneInfo("America/New_York"))
    assert cutoff_in(given, "Asia/Tokyo") == datetime(2026, 1, 5, 5, tzinfo=UTC)
    assert cutoff_in(datetime(1, 1, 1), "Asia/Tokyo").year == 1

"""``dagrun db init``, ``check``, ``backup`` and ``clean``."""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

import click

from dagrun.cli.app import App, pass_app
from dagrun.errors import StoreError, UsageError
from dagrun.store import retention, schema
from dagrun.timing.instants import iso, parse_cli_instant

if TYPE_CHECKING:
    from dagrun.store.clock import Skew


@click.group()
def db() -> None:
    """Create and check the metadata database."""


@db.command("init")
@pass_app
def init(app: App) -> None:
    """Create the schema (safe to run again)."""
    store = app.store
    click.echo(f"database ready: {store!r} (schema version {schema.SCHEMA_VERSION})")


@db.command("check")
@pass_app
def check(app: App) -> None:
    """Check the database: it answers, its schema is dagrun's and not newer than this
    dagrun, SQLite's quick_check finds every page sound, and every row of every table
    reads (on PostgreSQL: connectivity, schema version and a read of every table). Each
    problem is named on its own line; exit 1 if there is any. A sound database's clock is
    measured against this host's: the database's decides what is due. Writes nothing.
    """
    from dagrun.store import Store, clock, integrity

    store = Store(app.db_url, create=False, only_home_folder=True)
    try:
        found = integrity.check(store)
        skew = clock.measure(store) if found.ok else None
    finally:
        store.dispose()
    if found.refused is not None:
        raise StoreError(found.refused)
    if found.ok:
        click.echo(
            f"ok: {found.database}, schema version {found.version}, {found.tables} tables "
            f"and {found.rows:,} rows read"
        )
        click.echo(_clock_line(skew))
        return
    for damage in found.damage:
        click.echo(f"damaged: {damage}")
    raise StoreError(
        f"the database {found.database} is damaged ({len(found.damage)} problem(s) above): "
        "stop every dagrun process and put a copy made by `dagrun db backup` in its place, "
        "or move it aside and start a new one"
    )


def _clock_line(skew: Skew | None) -> str:
    """What ``db check`` says of the clocks: the database's minus this host's, and how,
    past the difference long-running processes report."""
    from dagrun.store.clock import SKEW_SECONDS

    if skew is None:
        return "clock: SQLite reads this host's clock, the only one: no difference to measure"
    line = f"clock: the database's minus this host's: {skew.seconds:+.3f} s"
    return line if abs(skew.seconds) <= SKEW_SECONDS else f"{line}; {skew.describe()}"


@db.command("backup")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--overwrite", is_flag=True, help="Replace PATH if it exists.")
@pass_app
def backup(app: App, path: Path, overwrite: bool) -> None:
    """Copy the SQLite database to PATH, safely while a scheduler and workers run (SQLite's
    backup API, in one read transaction: the copy is the database at one instant). The
    copy must pass quick_check before it is named PATH. To restore, stop every dagrun
    process and put the copy in the database's place. On PostgreSQL use pg_dump.

    \b
      dagrun db backup /backups/dagrun-2026-12-01.db
    """
    from dagrun.store import integrity

    started = time.monotonic()
    shown = [started]

    def progress(copied: int, total: int) -> None:
        if time.monotonic() - shown[0] >= 1 or (copied == total and shown[0] != started):
            shown[0] = time.monotonic()
            click.echo(f"copied {copied:,} of {total:,} pages…", err=True)

    pages = integrity.backup(app.store, path, overwrite=overwrite, progress=progress)
    seconds = time.monotonic() - started
    click.echo(f"copied {app.store.where} to {path.absolute()}: {pages:,} pages in {seconds:.1f}s")


@db.command("clean")
@click.option(
    "--before",
    required=True,
    metavar="D",
    help="Delete what is older than D: a date (local midnight) or a time "
    "(2026-01-31T02:30), read in each DAG's timezone for its runs and in UTC for audit "
    "rows and asset events; with an offset (2026-01-31T00:00+01:00), that instant for all.",
)
@click.option("--dry-run", is_flag=True, help="Count what would be deleted; delete nothing.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option(
    "--batch-size",
    type=click.IntRange(min=1),
    default=retention.BATCH_RUNS,
    show_default=True,
    help="Runs deleted per transaction.",
)
@pass_app
def clean(app: App, before: str, dry_run: bool, yes: bool, batch_size: int) -> None:
    """Delete finished history older than D, in batches: runs that ended (success or
    failed) with a logical date before D, with their task instances, attempts, callbacks
    and partition-write records; audit rows before D; asset events before D that a newer
    event of the same partition superseded (the latest of each partition stays); and the
    log segments no remaining attempt points into. Queued, running and waiting runs stay,
    however old. Safe while a scheduler and workers run. Asks first unless --yes.

    D is read as every command reads a date: 2026-01-01 means midnight of that day in each
    DAG's own timezone, so a run listed on 2025-12-31 by `dagrun runs list` goes and one
    listed on 2026-01-01 stays (as Airflow reads a timestamp without an offset in its
    default timezone).

    \b
      dagrun db clean --before 2026-01-01 --dry-run
      dagrun db clean --before 2026-01-01T00:00+01:00 --yes
    """
    cutoff = _cutoff(before)
    if not (dry_run or yes or sys.stdin.isatty()):
        raise UsageError("db clean deletes history: pass --yes to confirm (or --dry-run)")
    store = app.store
    planned = retention.plan(store, cutoff, batch=batch_size)
    if dry_run:
        click.echo(f"would delete, before {_when(cutoff)}: {_rows(planned)}")
        click.echo(f"would free {_logs(planned)}")
        return
    if not yes:
        click.echo(f"to delete, before {_when(cutoff)}: {_rows(planned)}; {_logs(planned)}")
        click.confirm("Delete them?", abort=True)
    started = datetime.now(UTC)

    def progress(done: retention.Tally) -> None:
        total = max(planned.runs, done.runs)
        click.echo(f"cleaned {done.runs:,} of {total:,} runs…", err=True)

    done = retention.clean(store, cutoff, batch=batch_size, progress=progress)
    seconds = (datetime.now(UTC) - started).total_seconds()
    click.echo(f"deleted, before {_when(cutoff)}: {_rows(done)} in {seconds:.1f}s")
    click.echo(f"freed {_logs(done)}")


def _cutoff(value: str) -> datetime:
    """--before as given: without an offset a wall-clock time (naive), which retention reads
    in each DAG's timezone; with one an instant."""
    parse_cli_instant(value, ZoneInfo("UTC"), what="--before")  # bad input is one line
    given = datetime.fromisoformat(value.strip())
    return given if given.tzinfo is None else given.astimezone(UTC)


def _when(cutoff: datetime) -> str:
    if cutoff.tzinfo is not None:
        return str(iso(cutoff))
    return f"{cutoff:%Y-%m-%d %H:%M} in each DAG's timezone (UTC for audit rows, asset events)"


def _rows(tally: retention.Tally) -> str:
    return ", ".join(
        f"{count:,} {name}"
        for name, count in [
            ("runs", tally.runs),
            ("task instances", tally.task_instances),
            ("attempts", tally.attempts),
            ("callbacks", tally.callbacks),
            ("partition writes", tally.partition_writes),
            ("asset events", tally.asset_events),
            ("audit rows", tally.audit_rows),
        ]
    )


def _logs(tally: retention.Tally) -> str:
    """Log files and bytes, and why some segments of deleted attempts stay."""
    text = f"{tally.log_files:,} log files ({_size(tally.log_bytes)})"
    kept = [
        (tally.shared_segments, "also hold logs of kept runs"),
        (tally.open_segments, "written lately or still open: a later clean takes them"),
        (tally.absent_files, "not on this host"),
    ]
    notes = [f"{n:,} {why}" for n, why in kept if n]
    return text + (f"; segments kept: {'; '.join(notes)}" if notes else "")


def _size(count: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:,} {unit}" if unit == "bytes" else f"{count:,.1f} {unit}"
        count /= 1024
    raise AssertionError("unreachable")


@db.command("rebind-folder")
@click.argument("path", type=click.Path(file_okay=False))
@pass_app
def rebind_folder(app: App, path: str) -> None:
    """Move the store to the dags folder PATH (audited). A store serves the first folder
    synced into it, so a command run from another directory never changes its DAGs; this
    is how to move it on purpose. DAGs whose files are not in PATH leave the list (their
    runs stay); PATH's DAGs come in.

    \b
      dagrun db rebind-folder /srv/pipelines/dags
    """
    from dagrun.runtime.dag_sync import rebind_folder as rebind

    report = rebind(app.store, path)
    click.echo(
        f"this store now serves {report.served}: {len(report.parsed)} file(s) parsed, "
        f"{len(report.removed)} removed"
    )


COMMANDS = [db]

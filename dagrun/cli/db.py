"""``dagrun db init``, ``dagrun db check`` and ``dagrun db clean``."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import click

from dagrun.cli.app import App, pass_app
from dagrun.errors import UsageError
from dagrun.store import retention, schema
from dagrun.timing.instants import iso, parse_cli_instant


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
    """Check connectivity and the schema version."""
    store = app.store
    with store.read() as conn:
        version = store.schema_version(conn)
        now = store.now(conn)
    click.echo(f"ok: {store!r}, schema version {version}, database clock {now.isoformat()}")


@db.command("clean")
@click.option(
    "--before",
    required=True,
    metavar="D",
    help="Delete what is older than D: a date (midnight UTC) or an instant "
    "(2026-01-31T02:30, UTC unless it has an offset).",
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

    \b
      dagrun db clean --before 2026-01-01 --dry-run
      dagrun db clean --before 2026-01-01T00:00+01:00 --yes
    """
    cutoff = parse_cli_instant(before, ZoneInfo("UTC"), what="--before")
    if not (dry_run or yes or sys.stdin.isatty()):
        raise UsageError("db clean deletes history: pass --yes to confirm (or --dry-run)")
    store = app.store
    planned = retention.plan(store, cutoff, batch=batch_size)
    if dry_run:
        click.echo(f"would delete, before {iso(cutoff)}: {_rows(planned)}")
        click.echo(f"would free {_logs(planned)}")
        return
    if not yes:
        click.echo(f"to delete, before {iso(cutoff)}: {_rows(planned)}; {_logs(planned)}")
        click.confirm("Delete them?", abort=True)
    started = datetime.now(UTC)

    def progress(done: retention.Tally) -> None:
        total = max(planned.runs, done.runs)
        click.echo(f"cleaned {done.runs:,} of {total:,} runs…", err=True)

    done = retention.clean(store, cutoff, batch=batch_size, progress=progress)
    seconds = (datetime.now(UTC) - started).total_seconds()
    click.echo(f"deleted, before {iso(cutoff)}: {_rows(done)} in {seconds:.1f}s")
    click.echo(f"freed {_logs(done)}")


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

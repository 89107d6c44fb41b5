"""``dagrun db init`` and ``dagrun db check``."""

from __future__ import annotations

import click

from dagrun.cli.app import App, pass_app
from dagrun.store import schema


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


COMMANDS = [db]

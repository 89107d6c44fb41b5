"""``dagrun pools list|set|delete``: named limits on how many tasks run at once."""

from __future__ import annotations

import click

from dagrun.authoring.dag import check_id
from dagrun.cli.app import App, echo_json, echo_table, pass_app
from dagrun.errors import DagDefinitionError, UsageError
from dagrun.store import audit, dag_reads
from dagrun.store import pools as pool_store


@click.group("pools")
def pools() -> None:
    """Pools cap how many tasks naming them (``pool="db"``) run at once, on all workers."""


@pools.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@pass_app
def list_pools(app: App, as_json: bool) -> None:
    """Pools with their slots and the tasks running and queued in them."""
    with app.store.read() as conn:
        rows = dag_reads.pool_rows(conn)
    if as_json:
        echo_json([r.__dict__ for r in rows])
        return
    if not rows:
        click.echo("no pools; create one with `dagrun pools set NAME SLOTS`")
        return
    echo_table(
        ["pool", "slots", "running", "queued", "description"],
        [
            [
                r.name,
                r.slots if r.exists else "-",
                r.running,
                r.queued,
                (r.description or "")
                if r.exists
                else f"does not exist: its tasks wait; `dagrun pools set {r.name} SLOTS`",
            ]
            for r in rows
        ],
    )


@pools.command("set")
@click.argument("name")
@click.argument("slots", type=click.IntRange(0))
@click.option("--description", default=None)
@pass_app
def set_pool(app: App, name: str, slots: int, description: str | None) -> None:
    """Create pool NAME with SLOTS slots, or resize it."""
    _check_name(name)
    with app.store.write() as conn:
        pool_store.set_pool(conn, name, slots, description)
        audit.record(app.store, conn, "pool_set", None, pool=name, slots=slots)
    click.echo(f"pool {name}: {slots} slot(s)")


@pools.command("delete")
@click.argument("name")
@pass_app
def delete_pool(app: App, name: str) -> None:
    """Delete pool NAME (its queued tasks then wait until it exists again)."""
    _check_name(name)
    with app.store.write() as conn:
        if not pool_store.delete_pool(conn, name):
            raise UsageError(f"no pool '{name}' (see `dagrun pools list`)")
        audit.record(app.store, conn, "pool_delete", None, pool=name)
    click.echo(f"pool {name} deleted")


def _check_name(name: str) -> None:
    """Pool names follow the rules of task ids (tasks name them), checked whole: a name typed
    with a trailing newline is refused rather than stored or echoed across two lines."""
    try:
        check_id("pool", name)
    except DagDefinitionError as exc:
        raise UsageError(str(exc)) from None


COMMANDS = [pools]

"""``dagrun assets list``: the assets DAGs produce and wait for, and their events."""

from __future__ import annotations

import click

from dagrun.cli.app import App, echo_json, echo_table, pass_app
from dagrun.store import assets, dag_reads


@click.group("assets")
def assets_group() -> None:
    """Assets: data tasks produce per date partition (``outlets``), and the DAGs scheduled
    on them (``schedule=[Asset(...)]``)."""


@assets_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@pass_app
def list_assets(app: App, as_json: bool) -> None:
    """Each asset with its producers, the DAGs waiting for it, and its latest partition."""
    with app.store.read() as conn:
        specs = [r.spec for r in dag_reads.active_dags(conn)]
        rows = assets.asset_rows(conn, specs)
    if as_json:
        echo_json([r.to_json() for r in rows])
        return
    if not rows:
        click.echo("no assets; give a task outlets=[Asset(NAME)] to produce one")
        return
    echo_table(
        ["asset", "produced by", "scheduled DAGs", "events", "latest ds"],
        [
            [
                r.name,
                ", ".join(r.producers) or "-",
                ", ".join(r.consumers) or "-",
                r.events,
                r.latest_key or "no events yet",
            ]
            for r in rows
        ],
    )


COMMANDS = [assets_group]

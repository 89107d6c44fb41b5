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
    """Each asset with its producers and the DAGs waiting for it, and per partition key
    (ds) its events, the latest one's fingerprint and time, and the runs that consumed it
    (``*``: a run that consumed an older event of the key)."""
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
        [
            "asset",
            "produced by",
            "scheduled DAGs",
            "ds",
            "events",
            "fingerprint",
            "latest event (UTC)",
            "consumed by",
        ],
        [line for r in rows for line in _lines(r)],
    )
    if any(not c.latest for r in rows for p in r.partitions for c in p.consumers):
        click.echo("* consumed an older event of the key")


def _lines(row: assets.AssetRow) -> list[list[str | int]]:
    """An asset's lines: one per partition key, the asset's own columns on the first."""
    head = [row.name, ", ".join(row.producers) or "-", ", ".join(row.consumers) or "-"]
    if not row.partitions:
        return [[*head, "no events yet", "", "", "", ""]]
    return [
        [*(head if i == 0 else ["", "", ""]), *_partition(p)] for i, p in enumerate(row.partitions)
    ]


def _partition(p: assets.Partition) -> list[str | int]:
    taken = [f"{c.dag_id}:{c.run_id or '(run gone)'}{'' if c.latest else '*'}" for c in p.consumers]
    return [
        p.key,
        p.events,
        (p.latest.fingerprint or "-")[:12],
        p.latest.created_at.strftime("%Y-%m-%d %H:%M:%SZ"),
        ", ".join(taken) or "-",
    ]


COMMANDS = [assets_group]

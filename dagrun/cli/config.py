"""``dagrun config list|get|init`` and ``dagrun init``: dagrun's own settings.

Every value is read through ``dagrun.settings``, the one module that knows the settings,
so what these print is what the other commands use, with where each value came from.
"""

from __future__ import annotations

from pathlib import Path

import click

from dagrun import settings
from dagrun.cli.app import echo_json, echo_table
from dagrun.errors import UsageError


@click.group()
def config() -> None:
    """See dagrun's settings and where each value comes from."""


@config.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def list_settings(as_json: bool) -> None:
    """Every setting: its value (secrets masked) and where it came from: a flag, an
    environment variable, the config file (with its line) or the default."""
    values = settings.config().all()
    if as_json:
        echo_json(
            [{"name": v.setting.name, "value": v.shown(), "source": v.source} for v in values]
        )
        return
    path = settings.config().path
    click.echo(f"config file: {path or 'none (defaults and environment only)'}", err=True)
    echo_table(
        ["setting", "value", "source"], [[v.setting.name, v.shown(), v.source] for v in values]
    )


@config.command("get")
@click.argument("name", metavar="SECTION.KEY")
def get_setting(name: str) -> None:
    """One setting's value (a secret masked), e.g. ``dagrun config get core.dags_folder``."""
    if name not in settings.BY_NAME:
        raise UsageError(
            f"unknown setting {name!r}{settings.near(name)} (see `dagrun config list`)"
        )
    click.echo(settings.config().lookup(name).shown())


@config.command("init")
@click.argument("path", type=click.Path(dir_okay=False), default=settings.FILE_NAME)
@click.option("--force", is_flag=True, help="Replace an existing file.")
def init_file(path: str, force: bool) -> None:
    """Write a commented starter config file (``./dagrun.toml``) listing every setting."""
    write_starter(Path(path), force)


@click.command("init")
@click.option("--force", is_flag=True, help="Replace an existing dagrun.toml.")
def init(force: bool) -> None:
    """Start a project here: a commented dagrun.toml and an empty dags folder."""
    write_starter(Path(settings.FILE_NAME), force)
    Path("dags").mkdir(exist_ok=True)
    click.echo("next: put a DAG file in dags/, then `dagrun dags list` and `dagrun standalone`")


def write_starter(path: Path, force: bool) -> None:
    if path.exists() and not force:
        raise UsageError(f"{path} exists: pass --force to replace it")
    path.write_text(settings.starter_file(), encoding="utf-8")
    click.echo(f"wrote {path}: uncomment a line to change a setting")


COMMANDS = [config, init]

"""``dagrun version`` and ``dagrun info``: what is installed and what it would use."""

from __future__ import annotations

import platform
import sys
from importlib.metadata import PackageNotFoundError, version

import click

from dagrun import settings
from dagrun.cli.app import App, echo_json, pass_app

LIBRARIES = ("SQLAlchemy", "click", "croniter", "networkx", "pandas", "psycopg", "pendulum")


def dagrun_version() -> str:
    return version("dagrun")


@click.command("version")
def version_command() -> None:
    """Print dagrun's version (as ``dagrun --version``)."""
    click.echo(f"dagrun, version {dagrun_version()}")


@click.command("info")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@pass_app
def info(app: App, as_json: bool) -> None:
    """This installation: dagrun's and Python's versions, the libraries it runs on, the
    settings file, the store (its password masked) and its schema, the dags folder."""
    config = settings.config()
    found = {
        "dagrun": dagrun_version(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "config file": str(config.path or "none"),
        "store": config.lookup("core.db_url").shown() or "SQLite under core.home",
        "dags folder (asked)": app.asked_folder,
        **{name: _version_of(name) for name in LIBRARIES},
    }
    found.update(_store_facts(app))
    if as_json:
        echo_json(found)
        return
    width = max(len(k) for k in found)
    for key, value in found.items():
        click.echo(f"{key.ljust(width)}  {value}")


def _store_facts(app: App) -> dict[str, str]:
    """The store's URL, schema version and served folder, or why they are unknown."""
    from dagrun.errors import DagrunError
    from dagrun.store import dag_reads

    try:
        store = app.store
        with store.read() as conn:
            return {
                "store url": repr(store),
                "schema version": str(store.schema_version(conn)),
                "dags folder (served)": dag_reads.served_folder(conn) or "none yet",
            }
    except DagrunError as exc:
        return {"store url": f"unavailable: {exc}"}


def _version_of(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


COMMANDS = [version_command, info]

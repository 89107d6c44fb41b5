"""The ``dagrun`` command line: thin click commands over the library.

Each command group lives in its own module; this one holds the global options and the single
place where outcomes become exit codes: 0 ok, 1 the work ran but something failed, 2 bad
input with a one-line error and no traceback (``--verbose`` shows one).
"""

from __future__ import annotations

import importlib
import sys

import click

from dagrun.cli.app import App, pass_app
from dagrun.errors import DagrunError, UsageError

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

#: Command name -> the module defining it. Modules load only when their command runs, so
#: ``dagrun dags list`` does not pay for the worker, the runner or the web page.
COMMAND_MODULES = {
    "dags": "dags",
    "backfill": "backfill",
    "run": "backfill",
    "runs": "runs",
    "trigger": "runs",
    "audit": "runs",
    "clear": "backfill",
    "test": "tasks",
    "tasks": "tasks",
    "logs": "tasks",
    "scheduler": "services",
    "worker": "services",
    "web": "web",
    "assets": "assets",
    "pools": "pools",
    "variables": "variables",
    "connections": "variables",
    "db": "db",
    "config": "config",
    "init": "config",
}


#: Commands that usually parse DAG files: they get a parse child forked before the store is
#: imported (see ``parser.prefork``); but not those of ``READING_ONLY``, which read files
#: without importing them (``dags check-airflow``).
PARSING_COMMANDS = {"dags", "backfill", "run", "trigger", "clear", "test", "tasks", "scheduler"}
READING_ONLY = {("dags", "check-airflow")}
_NEXT = "dagrun.next_word"


class LazyGroup(click.Group):
    """A click group that imports a command's module on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMAND_MODULES)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        ctx.meta[_NEXT] = tuple(args[1:2])  # the subcommand's name, for get_command
        return super().resolve_command(ctx, args)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        module = COMMAND_MODULES.get(name)
        if module is None:
            return None
        if name in PARSING_COMMANDS and (name, *ctx.meta.get(_NEXT, ())) not in READING_ONLY:
            from dagrun.parsing import parser

            parser.prefork(ctx.params.get("dags_folder") or "dags")
        loaded = importlib.import_module(f"dagrun.cli.{module}")
        return next((c for c in loaded.COMMANDS if c.name == name), None)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--dags-folder",
    envvar="DAGRUN_DAGS_FOLDER",
    default="dags",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Folder holding the DAG files (env DAGRUN_DAGS_FOLDER).",
)
@click.option(
    "--db",
    envvar="DAGRUN_DB_URL",
    default=None,
    help="SQLAlchemy URL of the metadata database (env DAGRUN_DB_URL; "
    "default: SQLite under DAGRUN_HOME, ./.dagrun).",
)
@click.option("--verbose", "-v", is_flag=True, help="Show tracebacks and debug logs.")
@click.version_option(package_name="dagrun")
@click.pass_context
def cli(ctx: click.Context, dags_folder: str, db: str | None, verbose: bool) -> None:
    """dagrun: a small, correct, fast orchestrator for data pipelines."""
    ctx.obj = App(dags_folder=dags_folder, db_url=db, verbose=verbose)
    ctx.call_on_close(ctx.obj.close)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the command and map its outcome to the documented exit code."""
    verbose = "--verbose" in (argv or sys.argv) or "-v" in (argv or sys.argv)
    try:
        code = cli.main(args=argv, standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        code = EXIT_FAILED
    except click.exceptions.Exit as exc:
        code = exc.exit_code
    except click.exceptions.NoArgsIsHelpError as exc:
        exc.show()  # a group named alone (`dagrun dags`): its help is the answer
        code = EXIT_USAGE
    except click.UsageError as exc:
        _error(usage_line(exc))
        code = EXIT_USAGE
    except click.ClickException as exc:
        _error(exc.format_message())
        code = EXIT_USAGE
    except UsageError as exc:
        if verbose:
            raise
        _error(str(exc))
        code = EXIT_USAGE
    except DagrunError as exc:
        if verbose:
            raise
        _error(str(exc))
        code = EXIT_FAILED
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        code = 130
    sys.exit(code if isinstance(code, int) else EXIT_OK)


def usage_line(exc: click.UsageError) -> str:
    """click's usage error in dagrun's one-line form: "Missing option '--start'." becomes
    "missing option '--start' (see `dagrun backfill --help`)"."""
    message = exc.format_message().strip().removesuffix(".")
    if message[:1].isupper() and message[1:2].islower():
        message = message[0].lower() + message[1:]
    if exc.ctx is None:
        return message
    return f"{message} (see `{exc.ctx.command_path} --help`)"


def _error(message: str) -> None:
    """The one line of a failed command: a newline inside the message (an id typed with one,
    a driver's multi-line text) is shown escaped, so a script reading stderr sees one line."""
    one_line = message.strip().replace("\r", "\\r").replace("\n", "\\n")
    click.echo(f"error: {one_line}", err=True)


__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "App", "cli", "main", "pass_app"]

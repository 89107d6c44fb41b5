"""The ``dagrun`` command line: thin click commands over the library.

Each command group lives in its own module; this one holds the global options and the single
place where outcomes become exit codes: 0 ok, 1 the work ran but something failed, 2 bad
input with a one-line error and no traceback (``--verbose`` shows one).
"""

from __future__ import annotations

import os
import sys

import click

from dagrun import processes, settings
from dagrun.cli.app import App, pass_app
from dagrun.cli.catalog import LazyGroup
from dagrun.errors import DagrunError, UsageError

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _use_config(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """``--config FILE``: read before any command module asks a setting (eager), and
    handed to every process this one starts (``DAGRUN_CONFIG``)."""
    if value:
        os.environ[settings.CONFIG_ENV] = os.path.abspath(value)
        settings.reload()


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--config",
    metavar="FILE",
    is_eager=True,
    expose_value=False,
    callback=_use_config,
    help="Settings file (env DAGRUN_CONFIG; default: the nearest dagrun.toml, else "
    "DAGRUN_HOME/dagrun.toml). See `dagrun config list`.",
)
@click.option(
    "--dags-folder",
    default=None,
    type=click.Path(file_okay=False),
    help="Folder holding the DAG files (setting core.dags_folder, env DAGRUN_DAGS_FOLDER; "
    "default ./dags).",
)
@click.option(
    "--db",
    default=None,
    help="SQLAlchemy URL of the metadata database (setting core.db_url, env DAGRUN_DB_URL; "
    "default: SQLite under DAGRUN_HOME, ./.dagrun).",
)
@click.option("--verbose", "-v", is_flag=True, help="Show tracebacks and debug logs.")
@click.version_option(package_name="dagrun", prog_name="dagrun")
@click.pass_context
def cli(ctx: click.Context, dags_folder: str | None, db: str | None, verbose: bool) -> None:
    """dagrun: a small, correct, fast orchestrator for data pipelines."""
    config = settings.config()
    if dags_folder is not None:
        config.override("core.dags_folder", dags_folder)
    if db is not None:
        config.override("core.db_url", db)
    ctx.obj = App(
        dags_folder=config.get("core.dags_folder"),
        db_url=config.get("core.db_url") or None,
        verbose=verbose,
    )
    ctx.call_on_close(ctx.obj.close)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the command and map its outcome to the documented exit code."""
    verbose = "--verbose" in (argv or sys.argv) or "-v" in (argv or sys.argv)
    try:
        code = cli.main(args=argv, prog_name="dagrun", standalone_mode=False)
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
    except Exception as exc:
        if verbose or not _from_the_database(exc):
            raise
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        _error(f"database error: {first}; `dagrun db check` checks the database")
        code = EXIT_FAILED
    sys.exit(code if isinstance(code, int) else EXIT_OK)


def program() -> None:
    """The ``dagrun`` program (its console script, ``python -m dagrun``): ``main``, in a
    process that ends without the interpreter's teardown (``processes.end_without_teardown``).
    ``main`` stays an ordinary function for callers that go on after it."""
    ending = processes.end_without_teardown()
    try:
        main()
    except SystemExit as exc:
        ending.code = exit_code(exc.code)
        raise
    ending.code = EXIT_OK


def exit_code(code: object) -> int:
    """The status ``sys.exit(code)`` ends a process with: None is 0, a message 1."""
    if code is None:
        return EXIT_OK
    return code if isinstance(code, int) else EXIT_FAILED


def _from_the_database(exc: Exception) -> bool:
    """An error of the database's driver that the store did not translate (a damaged
    index can break a constraint): told in one line like the store's own. By module name,
    so a command that never opened the database does not import a driver to ask."""
    return type(exc).__module__.split(".")[0] in {"sqlite3", "sqlalchemy", "psycopg"}


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


__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "App", "cli", "main", "pass_app", "program"]

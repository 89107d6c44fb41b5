"""Which module defines each command, Airflow's names for them, and the lazy root group.

A command's module is imported only when that command runs, so ``dagrun --help`` imports
none (the root's listing comes from ``COMMANDS``, checked against the commands themselves
by a test) and ``dagrun dags list`` does not pay for the worker or the web page. Airflow's
command names (``dagrun dags trigger``, ``dagrun db migrate`` ...) are rewritten to
dagrun's own before a command is looked up, so both give the same output and exit code;
``--help`` lists them under their own heading, and a mistyped name is answered with the
nearest of both.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass

import click

from dagrun.errors import UsageError
from dagrun.settings import closest


@dataclass(frozen=True)
class Entry:
    """A command's module, and its line in ``dagrun --help``."""

    module: str
    summary: str


#: Command name -> its module and its line in ``dagrun --help``.
COMMANDS = {
    "assets": Entry("assets", "Assets: the partitions tasks produce, and their consumers."),
    "audit": Entry("runs", "Operator actions, newest first: who did what, when."),
    "backfill": Entry("backfill", "Create and run every scheduled run of DAG in a range."),
    "clear": Entry("backfill", "Reset task instances so they run again."),
    "config": Entry("config", "See dagrun's settings and where each value comes from."),
    "connections": Entry("variables", "Add, read, list and delete connections."),
    "dags": Entry("dags", "Inspect and control the DAGs found in the dags folder."),
    "db": Entry("db", "Create, check, back up and clean the metadata database."),
    "info": Entry("info", "This installation: versions, settings file, store, folder."),
    "init": Entry("config", "Start a project here: a dagrun.toml and a dags folder."),
    "logs": Entry("tasks", "Print an attempt's log."),
    "pools": Entry("pools", "Pools cap how many tasks naming them run at once."),
    "run": Entry("backfill", "Trigger one run of DAG and execute it here."),
    "runs": Entry("runs", "List, inspect, cancel and mark DAG runs."),
    "scheduler": Entry("services", "The scheduler, with embedded workers."),
    "standalone": Entry("standalone", "Scheduler, workers and web page in one command."),
    "tasks": Entry("tasks", "Test tasks, see and mark their states, list dead letters."),
    "test": Entry("tasks", "Run every task of DAG for DATE here, deciding as a run does."),
    "trigger": Entry("runs", "Record a manual run of DAG and return at once."),
    "users": Entry("users", "Accounts and API tokens of the web page."),
    "variables": Entry("variables", "Set, read, list and delete variables."),
    "version": Entry("info", "Print dagrun's version."),
    "web": Entry("web", "Serve the web page and its JSON API."),
    "worker": Entry("services", "A worker only: claims and runs tasks."),
}

#: Commands that sync the DAG files: on a store not made yet, whose first sync parses every
#: file, they get their parse children forked before the store is imported (see
#: ``parser.prefork``); on a store made before, a child is forked only for a file that
#: changed (most often none). Not those of ``READING_ONLY``, which read files without
#: importing them (``dags check-airflow``).
PARSING_COMMANDS = {"dags", "backfill", "run", "trigger", "clear", "test", "tasks", "scheduler"}
#: Commands that run tasks here through a run's driver: on a SQLite store they get their
#: first attempt child forked before their module is imported (``attempt_pool.prefork``).
RUNNING_COMMANDS = {"backfill", "run"}
READING_ONLY = {("dags", "check-airflow")}


def _date_last(position: int) -> Callable[[list[str]], list[str]]:
    """Airflow's positional DATE (the ``position``-th argument) as dagrun's ``--date``."""

    def rewrite(args: list[str]) -> list[str]:
        if any(a.split("=")[0] in ("--date", "--run-id") for a in args):
            return args  # dagrun's own form
        plain = [i for i, a in enumerate(args) if not a.startswith("-")]
        if len(plain) > position:
            at = plain[position]
            return [*args[:at], "--date", *args[at:]]
        return args

    return rewrite


@dataclass(frozen=True)
class AirflowName:
    """An Airflow command and the dagrun command it runs (with its arguments rewritten)."""

    words: tuple[str, ...]
    target: tuple[str, ...]
    shown: str
    rewrite: Callable[[list[str]], list[str]] = list


AIRFLOW_NAMES = [
    AirflowName(("dags", "trigger"), ("trigger",), "trigger DAG"),
    AirflowName(("dags", "test"), ("test",), "test DAG DATE"),
    AirflowName(("dags", "list-runs"), ("runs", "list"), "runs list DAG"),
    AirflowName(("dags", "state"), ("runs", "state"), "runs state DAG --date DATE", _date_last(1)),
    AirflowName(("tasks", "list"), ("dags", "show"), "dags show DAG"),
    AirflowName(
        ("tasks", "state"), ("tasks", "state"), "tasks state DAG TASK --date DATE", _date_last(2)
    ),
    AirflowName(("db", "migrate"), ("db", "init"), "db init"),
]


def translate(args: list[str]) -> list[str]:
    """Airflow's command words at the head of ``args`` as dagrun's command."""
    for name in AIRFLOW_NAMES:
        n = len(name.words)
        if tuple(args[:n]) == name.words:
            return [*name.target, *name.rewrite(args[n:])]
    return args


def plain(text: str | None) -> str | None:
    """Help text as a terminal shows it: reStructuredText's ``literal`` as plain text."""
    return None if text is None else re.sub(r"``(.+?)``", r"\1", text)


def _plain_help(command: click.Command) -> None:
    """Every help text of a command (and its subcommands) in plain text."""
    command.help = plain(command.help)
    command.short_help = plain(command.short_help)
    for param in command.params:
        if isinstance(param, click.Option):
            param.help = plain(param.help)
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            _plain_help(sub)


class LazyGroup(click.Group):
    """The root group: imports a command's module on first use, knows Airflow's names."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        args = translate(args)
        ctx.meta[_ARGS] = tuple(args)  # what follows the command's name, for get_command
        name = args[0] if args else None
        if name is not None and name not in COMMANDS and not name.startswith("-"):
            near = _nearest(name, list(COMMANDS))
            raise UsageError(f"no such command '{name}'{near} (see `dagrun --help`)")
        found = super().resolve_command(ctx, args)
        _check_subcommand(ctx, found[1], args)
        return found

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        entry = COMMANDS.get(name)
        if entry is None:
            return None
        invoked = ctx.meta.get(_ARGS)  # None when only listed (help, completion, docs)
        rest = invoked[1:] if invoked else ()
        helping = "-h" in rest or "--help" in rest
        parses = name in PARSING_COMMANDS and (name, *rest[:1]) not in READING_ONLY
        if invoked and parses and not helping and _makes_its_store(ctx):
            from dagrun import settings
            from dagrun.parsing import parser

            parser.prefork(ctx.params.get("dags_folder") or settings.get("core.dags_folder"))
        if invoked and name in RUNNING_COMMANDS and not helping and _on_sqlite(ctx):
            from dagrun.runtime import attempt_pool

            attempt_pool.prefork()
        loaded = importlib.import_module(f"dagrun.cli.{entry.module}")
        command = next((c for c in loaded.COMMANDS if c.name == name), None)
        if command is not None:
            _plain_help(command)
            from dagrun.cli.completion import attach

            attach(command)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The listing from ``COMMANDS`` (no module imported), then Airflow's names."""
        with formatter.section("Commands"):
            formatter.write_dl([(name, e.summary) for name, e in sorted(COMMANDS.items())])
        with formatter.section("Airflow's command names (the same commands)"):
            rows = [(" ".join(n.words), f"= dagrun {n.shown}") for n in AIRFLOW_NAMES]
            formatter.write_dl([*rows, ("version", "= dagrun --version")])


_ARGS = "dagrun.args"


def _makes_its_store(ctx: click.Context) -> bool:
    """Whether the command's store (``--db``, else the settings') is not made yet."""
    from dagrun.store.location import not_made_yet

    return not_made_yet(ctx.params.get("db"))


def _on_sqlite(ctx: click.Context) -> bool:
    """Whether the command's store (``--db``, else the settings') is a SQLite file."""
    from dagrun.store.location import sqlite_file, store_url

    return sqlite_file(store_url(ctx.params.get("db"))) is not None


def _check_subcommand(ctx: click.Context, command: click.Command | None, args: list[str]) -> None:
    """A mistyped subcommand (``dags list-run``) answered with the nearest of dagrun's and
    Airflow's names for that group."""
    if not isinstance(command, click.Group) or len(args) < 2 or args[1].startswith("-"):
        return
    word = args[1]
    if word in command.commands:
        return
    airflow = [n.words[1] for n in AIRFLOW_NAMES if n.words[0] == args[0]]
    known = [*command.commands, *airflow]
    raise UsageError(
        f"no such command '{args[0]} {word}'{_nearest(word, known)} (see `dagrun {args[0]} --help`)"
    )


def _nearest(word: str, known: list[str]) -> str:
    found = closest(word, known)
    return f" (did you mean '{found}'?)" if found else ""

"""Shell completion of DAG ids, task ids and run ids from the store.

click completes commands and options by itself (``eval "$(_DAGRUN_COMPLETE=bash_source
dagrun)"``, or ``zsh_source`` / ``fish_source``); ``attach`` gives every argument or option
named ``dag_id``, ``task_id`` or ``run_id`` a completer that reads the store the command
would use. A store that cannot be read completes nothing: completion never prints an error.
"""

from __future__ import annotations

from collections.abc import Callable

import click
from click.shell_completion import CompletionItem


def _store_values(read: Callable) -> list[str]:
    """What ``read(conn)`` returns from the configured store, or nothing on any error."""
    try:
        from dagrun import settings
        from dagrun.store import Store

        store = Store(settings.get("core.db_url") or None, direct=True)
        try:
            with store.read() as conn:
                return list(read(conn))
        finally:
            store.dispose()
    except Exception:  # a completion must never fail the shell: no store, no values
        return []


def dag_ids(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    from dagrun.store import dag_reads

    found = _store_values(lambda conn: (r.dag_id for r in dag_reads.active_dags(conn)))
    return [CompletionItem(d) for d in sorted(found) if d.startswith(incomplete)]


def task_ids(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    from dagrun.store import dag_reads

    dag_id = ctx.params.get("dag_id")
    if not dag_id:
        return []
    found = _store_values(lambda conn: dag_reads.get_dag(conn, dag_id).spec.task_map)
    return [CompletionItem(t) for t in sorted(found) if t.startswith(incomplete)]


def run_ids(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    from dagrun.store import run_reads

    dag_id = ctx.params.get("dag_id")
    if not dag_id:
        return []
    found = _store_values(lambda conn: (r.run_id for r in run_reads.runs(conn, dag_id)))
    return [CompletionItem(r) for r in found if r.startswith(incomplete)]


COMPLETERS = {"dag_id": dag_ids, "task_id": task_ids, "run_id": run_ids}


def attach(command: click.Command) -> None:
    """Give the command's (and its subcommands') id parameters their completers."""
    for param in command.params:
        completer = COMPLETERS.get(param.name or "")
        if completer is not None and param._custom_shell_complete is None:
            param._custom_shell_complete = completer
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            attach(sub)

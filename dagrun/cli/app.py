"""What every command shares: the dags folder, the store (opened lazily), output helpers."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from typing import Any

import click

from dagrun.store import Store
from dagrun.sync import SyncReport, dags_folder, sync_dags


class App:
    """The per-invocation context: opens the store on first use and syncs DAG files once."""

    def __init__(self, dags_folder: str, db_url: str | None, verbose: bool):
        self.dags_folder = dags_folder
        self.db_url = db_url
        self.verbose = verbose
        self._store: Store | None = None
        self._synced: SyncReport | None = None

    @property
    def store(self) -> Store:
        if self._store is None:
            self._store = Store(self.db_url)
        return self._store

    @property
    def folder(self) -> str:
        return dags_folder(self.dags_folder)

    def sync(self) -> SyncReport:
        """Bring the registry up to date with the dags folder (changed files only)."""
        if self._synced is None:
            self._synced = sync_dags(self.store, self.folder)
        return self._synced

    def close(self) -> None:
        if self._store is not None:
            self._store.dispose()


pass_app = click.make_pass_decorator(App)


def echo_json(document: Any) -> None:
    click.echo(json.dumps(document, indent=2, default=str))


def iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def echo_table(headers: list[str], rows: list[list[Any]]) -> None:
    """A plain aligned table: readable in a terminal, stable for grep."""
    cells = [[("" if v is None else str(v)) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    click.echo(line.rstrip())
    for row in cells:
        click.echo("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())


def is_terminal() -> bool:
    return sys.stdout.isatty()

"""Where a store lives: its URL (a flag, else the setting ``core.db_url``, else SQLite under
``DAGRUN_HOME``), and whether its SQLite file is made yet.

A leaf of the store that imports no database code: the CLI asks it before it imports the
store, so that a command whose store is new forks its parse children first
(``cli.catalog``).
"""

from __future__ import annotations

import os
from pathlib import Path

from dagrun import settings


def dagrun_home() -> Path:
    return Path(settings.get("core.home")).absolute()


def default_url() -> str:
    return f"sqlite:///{dagrun_home() / 'dagrun.db'}"


def store_url(url: str | None = None) -> str:
    """``url``, else the setting ``core.db_url``, else SQLite under ``DAGRUN_HOME``."""
    return normalise_url(url or settings.get("core.db_url") or default_url())


def normalise_url(url: str) -> str:
    """``postgresql://`` means psycopg 3, as DESIGN promises."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def sqlite_file(url: str) -> str | None:
    """The file of a plain SQLite URL (``sqlite:///path``, no options); None for another."""
    if not url.startswith("sqlite:///") or "?" in url:
        return None
    database = url[len("sqlite:///") :]
    return database if database and database != ":memory:" else None


def not_made_yet(url: str | None = None) -> bool:
    """Whether the store at ``store_url(url)`` is a SQLite file that does not exist yet."""
    database = sqlite_file(store_url(url))
    return database is not None and not os.path.exists(database)

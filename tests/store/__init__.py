"""Tests of the store; ``store_statements`` gathers what the rendering tests check."""

from __future__ import annotations

import importlib
import pkgutil

import dagrun.store
from dagrun.store import sql


def store_statements() -> dict[str, tuple[str, sql.Statement]]:
    """Every statement a store module defines at its top level, by the name it is kept
    under (``rendered``), with the module that defines it."""
    found: dict[str, tuple[str, sql.Statement]] = {}
    for info in pkgutil.iter_modules(dagrun.store.__path__):
        module = importlib.import_module(f"dagrun.store.{info.name}")
        for value in vars(module).values():
            if isinstance(value, sql.Statement):
                known = found.setdefault(value.name, (info.name, value))
                assert known[1] is value, f"two statements are named {value.name!r}"
    return found

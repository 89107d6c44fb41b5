"""Tests of the store; ``store_statements`` gathers what the rendering tests check."""

from __future__ import annotations

from dagrun.store import sql
from dagrun.store.queries import every_statement


def store_statements() -> dict[str, tuple[str, sql.Statement]]:
    """Every statement the store declares (``queries.every_statement``)."""
    return every_statement()

"""The statements of ``clock`` (see ``queries``)."""

from __future__ import annotations

from sqlalchemy import func, select

from dagrun.store.sql import Statement, name_all

SERVER_CLOCK = Statement(
    "The database server's clock now (not the transaction's start), to measure this host's.",
    select(func.clock_timestamp()),
)


name_all(globals(), prefix="clock.")

"""The statements of ``audit`` (see ``queries``)."""

from __future__ import annotations

from sqlalchemy import insert, select

from dagrun.store.schema import audit_log
from dagrun.store.sql import Statement, binds, name_all
from dagrun.store.sql import bind as _b

INSERT_AUDIT = Statement(
    "Record an operator action (trigger, cancel, mark, clear, backfill, pause...) with who "
    "and when.",
    insert(audit_log).values(binds("at action dag_id run_id actor detail")),
)


_ENTRIES = select(*audit_log.c["at", "actor", "action", "dag_id", "run_id", "detail"])


_NEWEST = (audit_log.c.at.desc(), audit_log.c.id.desc())


NEWEST_ENTRIES = Statement(
    "The newest ``b_limit`` entries, newest first.",
    _ENTRIES.order_by(*_NEWEST).limit(_b("limit")),
)


NEWEST_DAG_ENTRIES = Statement(
    "The newest ``b_limit`` entries of one DAG, newest first.",
    _ENTRIES.where(audit_log.c.dag_id == _b("dag_id")).order_by(*_NEWEST).limit(_b("limit")),
)


name_all(globals(), prefix="audit.")

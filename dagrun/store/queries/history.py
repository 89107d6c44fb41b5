"""The statements of ``history`` (see ``queries``)."""

from __future__ import annotations

from sqlalchemy import func, select

from dagrun.store.schema import dag_run
from dagrun.store.schema import task_instance as ti
from dagrun.store.sql import Statement, name_all
from dagrun.store.sql import bind as _b
from dagrun.store.sql import bind_list as _many

NEWEST_RUNS = Statement(
    "A DAG's newest ``b_limit`` runs by logical date, newest first, with their times.",
    select(
        dag_run.c.id,
        dag_run.c.run_id,
        dag_run.c.logical_date,
        dag_run.c.state,
        dag_run.c.start_date,
        dag_run.c.end_date,
    )
    .where(dag_run.c.dag_id == _b("dag_id"))
    .order_by(dag_run.c.logical_date.desc())
    .limit(_b("limit")),
)


SLOWEST = Statement(
    "Each task's longest recorded duration in some runs (a mapped task's slowest index).",
    select(ti.c.run_pk, ti.c.task_id, func.max(ti.c.duration))
    .where(ti.c.run_pk.in_(_many("run_pks")), ti.c.duration.is_not(None))
    .group_by(ti.c.run_pk, ti.c.task_id),
)


name_all(globals(), prefix="history.")

"""The statements of ``heartbeats`` (see ``queries``)."""

from __future__ import annotations

from sqlalchemy import delete, func, null, select

from dagrun.states import RunState
from dagrun.store.schema import dag_run, heartbeat
from dagrun.store.sql import Statement, name_all, upsert
from dagrun.store.sql import bind as _b

#: Runs that need a scheduler to start or to go on: waiting, queued or running.
_UNFINISHED = [RunState.WAITING.value, RunState.QUEUED.value, RunState.RUNNING.value]


BEAT = Statement(
    "Record a process's heartbeat: its row is made on the first beat, its time and clock "
    "offset updated on the next.",
    upsert(heartbeat, "owner", ("beat_at", "clock_offset")),
)


FORGET = Statement(
    "A process that stops cleanly deletes its heartbeat.",
    delete(heartbeat).where(heartbeat.c.owner == _b("owner")),
)


PRUNE = Statement(
    "Delete the heartbeats of processes silent since ``before`` (they died).",
    delete(heartbeat).where(heartbeat.c.beat_at < _b("before")),
)


NEWEST = Statement(
    "The newest heartbeat of a role.",
    select(heartbeat)
    .where(heartbeat.c.role == _b("role"))
    .order_by(heartbeat.c.beat_at.desc())
    .limit(1),
)


SINCE = Statement(
    "Every heartbeat since ``since``, newest first: the processes alive.",
    select(heartbeat)
    .where(heartbeat.c.beat_at >= _b("since"))
    .order_by(heartbeat.c.beat_at.desc()),
)


UNFINISHED_RUN = (
    select(dag_run.c.id).where(dag_run.c.state.in_(_UNFINISHED)).limit(1).scalar_subquery()
)


STALL = Statement(
    "What the page's banner needs, in one statement of two index lookups: the newest beat of "
    "a role, one run that is waiting, queued or running (if any), and the database server's "
    "clock (none on SQLite, where the host's clock is the store's).",
    lambda dialect: select(
        func.max(heartbeat.c.beat_at).label("beat_at"),
        UNFINISHED_RUN.label("run_id"),
        (func.now() if dialect == "postgresql" else null()).label("now"),
    ).where(heartbeat.c.role == _b("role")),
)


name_all(globals(), prefix="heartbeats.")

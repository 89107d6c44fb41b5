"""Reads of runs and the states of their task instances: for the scheduler and the run
drivers' loops (which runs are waiting or due, what readiness decides from, a backfill's
progress) and for people (the CLI's lists, the web page's run lists and grid).

Nothing here changes state or locks a row: admission and readiness take the catalogue's
locks first (``LOCK_DAG``, ``LOCK_RUNS`` in ``statements``) and then read these.

Each read for people is batched (one statement per view, never one per row or cell) and
served by an index, so a DAG with ten thousand runs reads as fast as a new one; the web page
reads inside one short read transaction (a WAL snapshot on SQLite) and renders after it.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, fields
from datetime import datetime

from sqlalchemy import BindParameter, Connection, Select, func, literal_column, select, union_all

from dagrun.errors import RunNotFound, UsageError
from dagrun.states import (
    ACTIVE_RUN_STATES,
    FINISHED_TASK_STATES,
    RunState,
    RunType,
    TaskState,
    merged,
)
from dagrun.store import sql
from dagrun.store.schema import dag_run
from dagrun.store.schema import task_instance as ti
from dagrun.store.sql import Statement, name_all
from dagrun.store.sql import bind as _b
from dagrun.store.sql import bind_list as _many

#: SQLite refuses compound SELECTs of more than 500 terms; stay well below.
_UNION_CHUNK = 200

_ACTIVE = [s.value for s in ACTIVE_RUN_STATES]

_UNFINISHED = [s.value for s in (RunState.WAITING, RunState.QUEUED, RunState.RUNNING)]

_PENDING = [
    s.value
    for s in (
        TaskState.QUEUED,
        TaskState.RUNNING,
        TaskState.UP_FOR_RETRY,
        TaskState.UP_FOR_RESCHEDULE,
    )
]


# ---------------------------------------------------------------- runs


@dataclass(frozen=True)
class RunRow:
    id: int
    dag_id: str
    run_id: str
    logical_date: datetime
    data_interval_start: datetime
    data_interval_end: datetime
    run_type: str
    state: str
    created_at: datetime
    start_date: datetime | None
    end_date: datetime | None
    not_before: datetime | None = None
    conf_json: str | None = None

    @property
    def conf(self) -> dict:
        """The conf the run was triggered with (``{}`` for scheduled and backfill runs)."""
        return json.loads(self.conf_json) if self.conf_json else {}

    @property
    def duration(self) -> float | None:
        if self.start_date and self.end_date:
            return (self.end_date - self.start_date).total_seconds()
        return None


_RUNS = select(*[dag_run.c[f.name] for f in fields(RunRow)[:-1]], dag_run.c.conf)


def _run_rows(conn: Connection, statement: Statement, params: dict) -> list[RunRow]:
    return [RunRow(*r) for r in sql.tuples(conn, statement, params)]


def runs(
    conn: Connection,
    dag_id: str,
    *,
    state: str | None = None,
    limit: int | None = None,
    before: datetime | None = None,
    newest_first: bool = False,
) -> list[RunRow]:
    """A DAG's runs by logical date (``newest_first`` or oldest first), of one ``state``,
    before ``before``, at most ``limit`` of them: each filter given is one more condition."""
    statement = _run_list(bool(state), before is not None, bool(limit), newest_first)
    params = {"b_dag_id": dag_id, "b_state": state, "b_before": before, "b_limit": limit}
    return _run_rows(conn, statement, params)


_RUN_LISTS: dict[tuple[bool, ...], Statement] = {}


def _run_list(state: bool, before: bool, limited: bool, newest_first: bool) -> Statement:
    """The statement ``runs`` runs for the filters it was given, made once and named for
    its rendering to be kept (``rendered``), as ``_union`` does."""
    flags = (state, before, limited, newest_first)
    found = _RUN_LISTS.get(flags)
    if found is None:
        stmt = _RUNS.where(dag_run.c.dag_id == _b("dag_id"))
        if state:
            stmt = stmt.where(dag_run.c.state == _b("state"))
        if before:
            stmt = stmt.where(dag_run.c.logical_date < _b("before"))
        date = dag_run.c.logical_date
        stmt = stmt.order_by(date.desc() if newest_first else date)
        if limited:
            stmt = stmt.limit(_b("limit"))
        found = _RUN_LISTS[flags] = Statement("A DAG's runs, as ``runs`` filters them.", stmt)
        found.name = "run_reads.runs." + "".join("ny"[f] for f in flags)
    return found


def runs_between(
    conn: Connection, dag_id: str, start: datetime, end: datetime, *, scheduled: bool = False
) -> list[RunRow]:
    """The DAG's runs with logical dates in [start, end]; ``scheduled``: not the manual ones
    (a backfill's dates are those of scheduled and backfill runs, one per date)."""
    statement = _SCHEDULED_RUNS_BETWEEN if scheduled else _RUNS_BETWEEN
    return _run_rows(conn, statement, {"b_dag_id": dag_id, "b_start": start, "b_end": end})


_BETWEEN = (
    dag_run.c.dag_id == _b("dag_id"),
    dag_run.c.logical_date.between(_b("start"), _b("end")),
)
_BY_DATE = (dag_run.c.logical_date, dag_run.c.id)
_RUNS_BETWEEN = Statement(
    "A DAG's runs with logical dates in [``b_start``, ``b_end``], oldest first.",
    _RUNS.where(*_BETWEEN).order_by(*_BY_DATE),
)
_SCHEDULED_RUNS_BETWEEN = Statement(
    "A DAG's runs that are not manual with logical dates in [``b_start``, ``b_end``], oldest "
    "first.",
    _RUNS.where(*_BETWEEN, dag_run.c.run_type != RunType.MANUAL.value).order_by(*_BY_DATE),
)
_RUN_BY_ID = Statement(
    "A DAG's run with this run id.",
    _RUNS.where(dag_run.c.dag_id == _b("dag_id"), dag_run.c.run_id == _b("run_id")).limit(1),
)


def run_by_id(conn: Connection, dag_id: str, run_id: str) -> RunRow:
    found = sql.tuples(conn, _RUN_BY_ID, {"b_dag_id": dag_id, "b_run_id": run_id})
    if not found:
        raise RunNotFound(dag_id, f"with run id '{run_id}'")
    return RunRow(*found[0])


def run_by_date(conn: Connection, dag_id: str, logical_date: datetime) -> RunRow:
    """The run at ``logical_date``: the scheduled or backfill one (there is at most one),
    else the one manual run there; several manual runs there must be named by run id."""
    found = _run_rows(conn, _RUNS_AT, {"b_dag_id": dag_id, "b_logical_date": logical_date})
    scheduled = [r for r in found if r.run_type != RunType.MANUAL.value]
    if scheduled or len(found) == 1:
        return (scheduled or found)[0]
    if not found:
        raise RunNotFound(dag_id, f"at {logical_date.isoformat()}")
    names = ", ".join(r.run_id for r in found)
    raise UsageError(
        f"DAG '{dag_id}' has {len(found)} manual runs at {logical_date.isoformat()} ({names}): "
        "name one by its run id"
    )


_RUNS_AT = Statement(
    "A DAG's runs at one logical date, in id order.",
    _RUNS.where(
        dag_run.c.dag_id == _b("dag_id"), dag_run.c.logical_date == _b("logical_date")
    ).order_by(dag_run.c.id),
)
_RUN_BY_PK = Statement("One run by its key.", _RUNS.where(dag_run.c.id == _b("pk")))


def run_by_pk(conn: Connection, pk: int) -> RunRow:
    return RunRow(*sql.tuples(conn, _RUN_BY_PK, {"b_pk": pk})[0])


_PREVIOUS_SUCCESS = Statement(
    "The DAG's newest successful run before this one by logical date (Airflow's "
    "prev_*_success context names).",
    _RUNS.where(
        dag_run.c.dag_id == _b("dag_id"),
        dag_run.c.logical_date < _b("logical_date"),
        dag_run.c.state == RunState.SUCCESS.value,
    )
    .order_by(dag_run.c.logical_date.desc())
    .limit(1),
)


def previous_success(conn: Connection, dag_id: str, logical_date: datetime) -> RunRow | None:
    """The DAG's newest successful run before ``logical_date``; None when there is none."""
    found = sql.tuples(
        conn, _PREVIOUS_SUCCESS, {"b_dag_id": dag_id, "b_logical_date": logical_date}
    )
    return RunRow(*found[0]) if found else None


def external_states(
    conn: Connection, dag_id: str, logical_date: datetime, task_ids: Collection[str] | None = None
) -> dict[str, str] | None:
    """What an ExternalTaskSensor watches in a DAG's run at a logical date (the newest, when
    manual runs share the date): the state of each of ``task_ids`` that has instances (a
    mapped task's as one state), or with no ``task_ids`` the run's own state, under the
    DAG's id. None while there is no such run."""
    at = {"b_dag_id": dag_id, "b_logical_date": logical_date}
    run_pk = sql.scalar(conn, _NEWEST_RUN_AT, at)
    if run_pk is None:
        return None
    if task_ids is None:
        return {dag_id: sql.scalar(conn, _RUN_STATE, {"b_run_pk": run_pk})}
    found: dict[str, TaskState] = {}
    params = {"b_run_pk": run_pk, "b_task_ids": sorted(task_ids)}
    for task_id, state in sql.tuples(conn, _TASK_STATES, params):
        known = found.get(task_id)
        found[task_id] = TaskState(state) if known is None else merged(known, TaskState(state))
    return {task_id: state.value for task_id, state in found.items()}


_NEWEST_RUN_AT = Statement(
    "The newest of a DAG's runs at one logical date.",
    select(dag_run.c.id)
    .where(dag_run.c.dag_id == _b("dag_id"), dag_run.c.logical_date == _b("logical_date"))
    .order_by(dag_run.c.id.desc())
    .limit(1),
)
_RUN_STATE = Statement(
    "The state of one run.", select(dag_run.c.state).where(dag_run.c.id == _b("run_pk"))
)
_TASK_STATES = Statement(
    "The states of some tasks' instances in a run (a mapped task has one per index).",
    select(ti.c.task_id, ti.c.state).where(
        ti.c.run_pk == _b("run_pk"), ti.c.task_id.in_(_many("task_ids"))
    ),
)


# ---------------------------------------------------------------- the latest runs of many DAGs


def latest_runs(conn: Connection, dag_ids: list[str]) -> dict[str, datetime]:
    """Each DAG's latest logical date of a scheduled, backfilled or asset run (manual runs
    are not on the schedule).

    Per DAG, the last key of the one-run-per-date index (its predicate written out, so
    SQLite uses that partial index): a ``max()`` grouped by DAG read every run of the DAG,
    28 ms at 100,000 runs on each grid page and DAG list.
    """
    return dict(_per_dag(conn, _latest_run, dag_ids))


def _latest_run(dag_id: BindParameter) -> Select:
    scheduled = dag_run.c.run_type != literal_column(f"'{RunType.MANUAL.value}'")
    return (
        select(dag_run.c.dag_id, dag_run.c.logical_date)
        .where(dag_run.c.dag_id == dag_id, scheduled)
        .order_by(dag_run.c.logical_date.desc())
        .limit(1)
    )


def _per_dag(
    conn: Connection,
    part: Callable[[BindParameter], Select],
    dag_ids: list[str],
    params: dict | None = None,
) -> Iterator[tuple]:
    """The rows of ``part`` for every DAG, as a UNION ALL of one statement per 200 DAGs:
    each part reads only its own rows through an index, where a window function or a
    GROUP BY would read every run. The DAG ids are bound, so the statement for n DAGs is
    rendered once (``_union``), not at every page."""
    for start in range(0, len(dag_ids), _UNION_CHUNK):
        chunk = dag_ids[start : start + _UNION_CHUNK]
        bound = {f"b_dag_{i}": dag_id for i, dag_id in enumerate(chunk)}
        yield from sql.tuples(conn, _union(part, len(chunk)), {**bound, **(params or {})})


_UNIONS: dict[tuple[Callable, int], Statement] = {}


def _union(part: Callable[[BindParameter], Select], count: int) -> Statement:
    """``part`` for ``count`` DAGs (``b_dag_0`` ...) as one statement, named for its
    rendering to be kept (``rendered``)."""
    found = _UNIONS.get((part, count))
    if found is None:
        parts = [part(_b(f"dag_{i}")) for i in range(count)]
        union = parts[0] if count == 1 else union_all(*(p.subquery().select() for p in parts))
        found = _UNIONS[part, count] = Statement(f"{part.__name__} of {count} DAGs.", union)
        found.name = f"run_reads.{part.__name__.strip('_')}.{count}"
    return found


def recent_runs(conn: Connection, dag_ids: list[str], per_dag: int) -> dict[str, list[RunRow]]:
    """The newest ``per_dag`` runs of each DAG (oldest first): per DAG, ``ORDER BY
    logical_date DESC LIMIT n`` through the (dag_id, logical_date) key."""
    found: dict[str, list[RunRow]] = {d: [] for d in dag_ids}
    for row in _per_dag(conn, _recent_runs, dag_ids, {"b_per_dag": per_dag}):
        run = RunRow(*row)
        found[run.dag_id].append(run)
    for found_runs in found.values():
        found_runs.sort(key=lambda r: r.logical_date)
    return found


def _recent_runs(dag_id: BindParameter) -> Select:
    newest = _RUNS.where(dag_run.c.dag_id == dag_id).order_by(dag_run.c.logical_date.desc())
    return newest.limit(_b("per_dag"))


def run_page(
    conn: Connection, dag_id: str, before: datetime | None, limit: int, state: str | None = None
) -> tuple[list[RunRow], datetime | None]:
    """The ``limit`` newest runs before ``before`` (oldest first) and the older page's cursor.

    One statement through the (dag_id, logical_date) key; its extra row tells whether older
    runs exist, so paging deep into a long history costs what the first page costs.
    """
    rows = runs(conn, dag_id, state=state, limit=limit + 1, before=before, newest_first=True)
    page = list(reversed(rows[:limit]))
    return page, page[0].logical_date if len(rows) > limit else None


# ---------------------------------------------------------------- progress

_RUN_IDS_IN_STATE = Statement(
    "The ids of the runs in one state, oldest logical date first.",
    select(dag_run.c.id).where(dag_run.c.state == _b("state")).order_by(dag_run.c.logical_date),
)
_UNFINISHED_RUN_IDS = Statement(
    "The ids of the runs not ended yet.",
    select(dag_run.c.id).where(dag_run.c.state.in_(_UNFINISHED)),
)


def runs_in_state(conn: Connection, run_pks: list[int], state: RunState) -> list[int]:
    """Which of these runs are in ``state``, oldest logical date first.

    Reads the runs in that state (an index search) and keeps the wanted ones here: a backfill
    asks this for hundreds of runs several times a second, and a long ``IN`` list costs more
    to build than the few rows it saves."""
    if not run_pks:
        return []
    wanted = set(run_pks)
    found = sql.scalars(conn, _RUN_IDS_IN_STATE, {"b_state": state.value})
    return [pk for pk in found if pk in wanted]


def all_finished(conn: Connection, run_pks: list[int]) -> bool:
    """Whether every one of these runs has ended (see ``runs_in_state`` on why no IN list)."""
    return not set(run_pks) & set(sql.scalars(conn, _UNFINISHED_RUN_IDS))


_RUN_STATE_COUNTS = Statement(
    "How many of these runs are in each state.",
    select(dag_run.c.state, func.count())
    .where(dag_run.c.id.in_(_many("run_pks")))
    .group_by(dag_run.c.state),
)
_TASK_STATE_COUNTS = Statement(
    "How many task instances of these runs are in each state.",
    select(ti.c.state, func.count()).where(ti.c.run_pk.in_(_many("run_pks"))).group_by(ti.c.state),
)


def run_state_counts(conn: Connection, run_pks: list[int]) -> Counter:
    return _counts(conn, _RUN_STATE_COUNTS, run_pks)


def task_state_counts(conn: Connection, run_pks: list[int]) -> Counter:
    return _counts(conn, _TASK_STATE_COUNTS, run_pks)


def _counts(conn: Connection, statement: Statement, run_pks: list[int]) -> Counter:
    """States counted over some runs, ``sql.IN_CHUNK`` runs a statement (a backfill of
    9,000 runs asks for its progress every second)."""
    found: Counter = Counter()
    for chunk in sql.chunks(run_pks):
        found.update(dict(sql.tuples(conn, statement, {"b_run_pks": chunk})))
    return found


_PENDING_TASK = Statement(
    "One task instance of a DAG that is queued, running or waiting for a retry or a poke, if any.",
    select(ti.c.id).where(ti.c.dag_id == _b("dag_id"), ti.c.state.in_(_PENDING)).limit(1),
)


def has_pending_tasks(conn: Connection, dag_id: str) -> bool:
    """Whether a task of the DAG, in any run, is queued, running or waiting for a retry or
    (a sensor) for its next poke."""
    return bool(sql.tuples(conn, _PENDING_TASK, {"b_dag_id": dag_id}))


def has_active_runs(conn: Connection, dag_id: str | None = None) -> bool:
    """Whether any run (of one DAG, or of any) is queued or running: the page then refreshes."""
    if dag_id is None:
        return bool(sql.tuples(conn, _ACTIVE_RUN))
    return bool(sql.tuples(conn, _ACTIVE_RUN_OF_DAG, {"b_dag_id": dag_id}))


_ACTIVE_RUN = Statement(
    "One run that is queued or running, if any.",
    select(dag_run.c.id).where(dag_run.c.state.in_(_ACTIVE)).limit(1),
)
_ACTIVE_RUN_OF_DAG = Statement(
    "One run of a DAG that is queued or running, if any.",
    select(dag_run.c.id)
    .where(dag_run.c.state.in_(_ACTIVE), dag_run.c.dag_id == _b("dag_id"))
    .limit(1),
)


# ---------------------------------------------------------------- what the scheduler decides from

RUN_BY_KEY = Statement(
    "The run of a DAG with this run id (manual runs are unique by it).",
    select(dag_run.c.id).where(dag_run.c.dag_id == _b("dag_id"), dag_run.c.run_id == _b("run_id")),
)
COUNT_ACTIVE_RUNS = Statement(
    "How many of a DAG's runs are queued or running (max_active_runs counts these).",
    select(func.count())
    .select_from(dag_run)
    .where(
        dag_run.c.dag_id == _b("dag_id"),
        dag_run.c.state.in_([s.value for s in ACTIVE_RUN_STATES]),
    ),
)
_WAITING = select(dag_run.c.id).where(
    dag_run.c.dag_id == _b("dag_id"),
    dag_run.c.state == RunState.WAITING.value,
    dag_run.c.not_before.is_(None) | (dag_run.c.not_before <= _b("now")),
)
WAITING_RUNS = Statement(
    "A DAG's waiting runs whose start time (spread, trigger --at) has come, oldest logical "
    "date first (the order of admission): a run delayed to later takes no slot meanwhile.",
    _WAITING.order_by(dag_run.c.logical_date),
)
WAITING_RUNS_NEWEST = Statement(
    "A DAG's waiting runs whose start time has come, newest logical date first (backfill "
    "--reverse).",
    _WAITING.order_by(dag_run.c.logical_date.desc()),
)
DUE_RUNS = Statement(
    "A DAG's queued runs whose start time (spread) has come, in id order.",
    select(dag_run.c.id)
    .where(
        dag_run.c.dag_id == _b("dag_id"),
        dag_run.c.state == RunState.QUEUED.value,
        dag_run.c.not_before.is_(None) | (dag_run.c.not_before <= _b("now")),
    )
    .order_by(dag_run.c.id),
)
RUN_TASK_STATES = Statement(
    "Every task instance state of these runs (what readiness decides from; a mapped task "
    "has a row per index).",
    select(ti.c.run_pk, ti.c.task_id, ti.c.state).where(ti.c.run_pk.in_(_many("run_pks"))),
)
SOME_TASK_STATES = Statement(
    "The states of some tasks of these runs: what readiness decides from after a commit "
    "(the tasks that ended, their downstream and those tasks' upstream).",
    select(ti.c.run_pk, ti.c.task_id, ti.c.state).where(
        ti.c.run_pk.in_(_many("run_pks")), ti.c.task_id.in_(_many("task_ids"))
    ),
)
RUNS_WITH_WORK_LEFT = Statement(
    "Which of these runs have a task instance not finished yet (read as far as the first).",
    select(dag_run.c.id).where(
        dag_run.c.id.in_(_many("run_pks")),
        select(ti.c.id)
        .where(
            ti.c.run_pk == dag_run.c.id,
            ti.c.state.not_in(sorted(s.value for s in FINISHED_TASK_STATES)),
        )
        .exists(),
    ),
)
_LOGICAL_DATE = select(dag_run.c.logical_date).where(dag_run.c.id == _b("run_pk"))

PREVIOUS_RUN = Statement(
    "The DAG's run just before this one by logical date (what depends_on_past looks at).",
    select(dag_run.c.id)
    .where(
        dag_run.c.dag_id == _b("dag_id"), dag_run.c.logical_date < _LOGICAL_DATE.scalar_subquery()
    )
    .order_by(dag_run.c.logical_date.desc())
    .limit(1),
)
NEXT_RUN = Statement(
    "The DAG's run just after this one by logical date (it may wait on this one's past).",
    select(dag_run.c.id)
    .where(
        dag_run.c.dag_id == _b("dag_id"), dag_run.c.logical_date > _LOGICAL_DATE.scalar_subquery()
    )
    .order_by(dag_run.c.logical_date)
    .limit(1),
)
RUNS_STARTED_BEFORE = Statement(
    "A DAG's running runs that started before ``b_before`` (dagrun_timeout), in id order.",
    select(dag_run.c.id)
    .where(
        dag_run.c.dag_id == _b("dag_id"),
        dag_run.c.state == RunState.RUNNING.value,
        dag_run.c.start_date < _b("before"),
    )
    .order_by(dag_run.c.id),
)
CLAIMED_RUNS = Statement(
    "What claimed attempts need of their runs: run id, dates, conf.",
    select(
        *dag_run.c["id", "run_id", "logical_date", "data_interval_start", "data_interval_end"],
        dag_run.c.conf,
    ).where(dag_run.c.id.in_(_many("run_pks"))),
)
UPSTREAM_VALUES = Statement(
    "The return values of some tasks of one run (TaskFlow data passing), a mapped task's "
    "in index order.",
    select(ti.c.task_id, ti.c.map_index, ti.c.return_value)
    .where(ti.c.run_pk == _b("run_pk"), ti.c.task_id.in_(_many("task_ids")))
    .order_by(ti.c.task_id, ti.c.map_index),
)
RUNS_BY_DATE = Statement(
    "Some DAGs' runs that are not manual ones, by DAG and logical date: the runs asset keys "
    "map to (``RUN_FOR_DATE`` for many).",
    select(dag_run.c.dag_id, dag_run.c.logical_date, dag_run.c.run_id).where(
        dag_run.c.dag_id.in_(_many("dag_ids")), dag_run.c.run_type != RunType.MANUAL.value
    ),
)
RUN_FOR_DATE = Statement(
    "A DAG's run (not a manual one) at a logical date: the run an asset key maps to.",
    select(dag_run.c.id, dag_run.c.state).where(
        dag_run.c.dag_id == _b("dag_id"),
        dag_run.c.logical_date == _b("logical_date"),
        dag_run.c.run_type != RunType.MANUAL.value,
    ),
)


name_all(globals(), prefix="run_reads.")

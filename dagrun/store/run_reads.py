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
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from dagrun.errors import RunNotFound, UsageError
from dagrun.states import (
    RunState,
    RunType,
    TaskState,
    merged,
)
from dagrun.store import sql

if TYPE_CHECKING:
    from sqlalchemy import Connection


#: The statements of this module (``queries/run_reads.py``).
Q = sql.Catalogue("dagrun.store.queries.run_reads", "run_reads.")

#: SQLite refuses compound SELECTs of more than 500 terms; stay well below.
_UNION_CHUNK = 200


# ---------------------------------------------------------------- runs


@dataclass(frozen=True)
class RunRow:
    """A DAG run as the store holds it."""

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


def _run_rows(conn: Connection, statement: sql.Named, params: dict) -> list[RunRow]:
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
    flags = (bool(state), before is not None, bool(limit), newest_first)
    statement = Q.variant("run_list", "".join("ny"[f] for f in flags))
    params = {"b_dag_id": dag_id, "b_state": state, "b_before": before, "b_limit": limit}
    return _run_rows(conn, statement, params)


def runs_between(
    conn: Connection, dag_id: str, start: datetime, end: datetime, *, scheduled: bool = False
) -> list[RunRow]:
    """The DAG's runs with logical dates in [start, end]; ``scheduled``: not the manual ones
    (a backfill's dates are those of scheduled and backfill runs, one per date)."""
    statement = Q.SCHEDULED_RUNS_BETWEEN if scheduled else Q.RUNS_BETWEEN
    return _run_rows(conn, statement, {"b_dag_id": dag_id, "b_start": start, "b_end": end})


def run_by_id(conn: Connection, dag_id: str, run_id: str) -> RunRow:
    found = sql.tuples(conn, Q.RUN_BY_ID, {"b_dag_id": dag_id, "b_run_id": run_id})
    if not found:
        raise RunNotFound(dag_id, f"with run id '{run_id}'")
    return RunRow(*found[0])


def run_by_date(conn: Connection, dag_id: str, logical_date: datetime) -> RunRow:
    """The run at ``logical_date``: the scheduled or backfill one (there is at most one),
    else the one manual run there; several manual runs there must be named by run id."""
    found = _run_rows(conn, Q.RUNS_AT, {"b_dag_id": dag_id, "b_logical_date": logical_date})
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


def run_by_pk(conn: Connection, pk: int) -> RunRow:
    return RunRow(*sql.tuples(conn, Q.RUN_BY_PK, {"b_pk": pk})[0])


def previous_success(conn: Connection, dag_id: str, logical_date: datetime) -> RunRow | None:
    """The DAG's newest successful run before ``logical_date``; None when there is none."""
    found = sql.tuples(
        conn, Q.PREVIOUS_SUCCESS, {"b_dag_id": dag_id, "b_logical_date": logical_date}
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
    run_pk = sql.scalar(conn, Q.NEWEST_RUN_AT, at)
    if run_pk is None:
        return None
    if task_ids is None:
        return {dag_id: sql.scalar(conn, Q.RUN_STATE, {"b_run_pk": run_pk})}
    found: dict[str, TaskState] = {}
    params = {"b_run_pk": run_pk, "b_task_ids": sorted(task_ids)}
    for task_id, state in sql.tuples(conn, Q.TASK_STATES, params):
        known = found.get(task_id)
        found[task_id] = TaskState(state) if known is None else merged(known, TaskState(state))
    return {task_id: state.value for task_id, state in found.items()}


# ---------------------------------------------------------------- the latest runs of many DAGs


def latest_runs(conn: Connection, dag_ids: list[str]) -> dict[str, datetime]:
    """Each DAG's latest logical date of a scheduled, backfilled or asset run (manual runs
    are not on the schedule).

    Per DAG, the last key of the one-run-per-date index (its predicate written out, so
    SQLite uses that partial index): a ``max()`` grouped by DAG read every run of the DAG,
    28 ms at 100,000 runs on each grid page and DAG list.
    """
    return dict(_per_dag(conn, "latest_run", dag_ids))


def _per_dag(
    conn: Connection,
    part: str,
    dag_ids: list[str],
    params: dict | None = None,
) -> Iterator[tuple]:
    """The rows of ``part`` for every DAG, as a UNION ALL of one statement per 200 DAGs:
    each part reads only its own rows through an index, where a window function or a
    GROUP BY would read every run. The DAG ids are bound, so the statement for n DAGs is
    rendered once (``queries/run_reads.union``), not at every page."""
    for start in range(0, len(dag_ids), _UNION_CHUNK):
        chunk = dag_ids[start : start + _UNION_CHUNK]
        bound = {f"b_dag_{i}": dag_id for i, dag_id in enumerate(chunk)}
        union = Q.variant("union", part, len(chunk))
        yield from sql.tuples(conn, union, {**bound, **(params or {})})


def recent_runs(conn: Connection, dag_ids: list[str], per_dag: int) -> dict[str, list[RunRow]]:
    """The newest ``per_dag`` runs of each DAG (oldest first): per DAG, ``ORDER BY
    logical_date DESC LIMIT n`` through the (dag_id, logical_date) key."""
    found: dict[str, list[RunRow]] = {d: [] for d in dag_ids}
    for row in _per_dag(conn, "recent_runs", dag_ids, {"b_per_dag": per_dag}):
        run = RunRow(*row)
        found[run.dag_id].append(run)
    for found_runs in found.values():
        found_runs.sort(key=lambda r: r.logical_date)
    return found


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


def runs_in_state(conn: Connection, run_pks: list[int], state: RunState) -> list[int]:
    """Which of these runs are in ``state``, oldest logical date first.

    Reads the runs in that state (an index search) and keeps the wanted ones here: a backfill
    asks this for hundreds of runs several times a second, and a long ``IN`` list costs more
    to build than the few rows it saves."""
    if not run_pks:
        return []
    wanted = set(run_pks)
    found = sql.scalars(conn, Q.RUN_IDS_IN_STATE, {"b_state": state.value})
    return [pk for pk in found if pk in wanted]


def all_finished(conn: Connection, run_pks: list[int]) -> bool:
    """Whether every one of these runs has ended (see ``runs_in_state`` on why no IN list)."""
    return not set(run_pks) & set(sql.scalars(conn, Q.UNFINISHED_RUN_IDS))


def run_state_counts(conn: Connection, run_pks: list[int]) -> Counter:
    return _counts(conn, Q.RUN_STATE_COUNTS, run_pks)


def task_state_counts(conn: Connection, run_pks: list[int]) -> Counter:
    return _counts(conn, Q.TASK_STATE_COUNTS, run_pks)


def _counts(conn: Connection, statement: sql.Named, run_pks: list[int]) -> Counter:
    """States counted over some runs, ``sql.IN_CHUNK`` runs a statement (a backfill of
    9,000 runs asks for its progress every second)."""
    found: Counter = Counter()
    for chunk in sql.chunks(run_pks):
        found.update(dict(sql.tuples(conn, statement, {"b_run_pks": chunk})))
    return found


def has_pending_tasks(conn: Connection, dag_id: str) -> bool:
    """Whether a task of the DAG, in any run, is queued, running or waiting for a retry or
    (a sensor) for its next poke."""
    return bool(sql.tuples(conn, Q.PENDING_TASK, {"b_dag_id": dag_id}))


def has_active_runs(conn: Connection, dag_id: str | None = None) -> bool:
    """Whether any run (of one DAG, or of any) is queued or running: the page then refreshes."""
    if dag_id is None:
        return bool(sql.tuples(conn, Q.ACTIVE_RUN))
    return bool(sql.tuples(conn, Q.ACTIVE_RUN_OF_DAG, {"b_dag_id": dag_id}))


# ---------------------------------------------------------------- what the scheduler decides from

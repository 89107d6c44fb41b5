"""Runs through their life: create, admit, start, advance (task readiness), end, clear.

A run is created ``waiting``; admission moves it to ``queued`` while the DAG's queued and
running runs stay within ``max_active_runs`` (under the DAG row lock); starting makes it
``running`` once its ``spread`` delay has passed; ``advance_runs`` then applies the trigger
rules, queueing ready tasks and ending the run when every task has finished. That function
is the only place task readiness is decided: starting a run, recording completions, reaping
a lease and clearing tasks all call it. The statements are in ``statements.py``, the reads
they decide from in ``run_reads``.

Callers pass ``now`` from ``Store.now()``: the database server's clock on PostgreSQL.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from dagrun.authoring import mapping
from dagrun.parsing.spec import DagSpec, TaskSpec
from dagrun.states import RunState, RunType, TaskState, merged
from dagrun.store import callbacks, run_reads, sql
from dagrun.store.catalogue import TRANSITIONS as q
from dagrun.store.engine import capabilities
from dagrun.store.readiness import Decisions, evaluate
from dagrun.timing.timetable import DataInterval

if TYPE_CHECKING:
    from sqlalchemy import Connection


SpecLookup = Callable[[str], DagSpec]
_TASK_STATES = {s.value: s for s in TaskState}
_PAST_OK = frozenset({TaskState.SUCCESS.value, TaskState.SKIPPED.value})


def run_id_for(kind: RunType | str, logical_date: datetime) -> str:
    """The run id dagrun gives a run it names itself: ``<kind>__<logical date>``."""
    return (
        f"{RunType(kind).value if isinstance(kind, RunType) else kind}__{logical_date.isoformat()}"
    )


def lock_dag(conn: Connection, dag_id: str, *, skip_locked: bool = False) -> bool:
    """Take the DAG row lock that serialises run creation and admission for one DAG.

    With ``skip_locked`` a second scheduler passes over a DAG another one is handling
    (returns False) instead of waiting for it.
    """
    statement = q.LOCK_DAG_OR_SKIP if skip_locked else q.LOCK_DAG
    return bool(sql.tuples(conn, statement, {"b_dag_id": dag_id}))


def create_runs(
    conn: Connection,
    spec: DagSpec,
    intervals: Iterable[DataInterval],
    run_type: RunType,
    now: datetime,
    start_delay: timedelta = timedelta(0),
) -> int:
    """Insert a waiting run per interval; an existing run for the date is left alone.
    Returns how many were created."""
    rows = [
        _run_row(spec, i, run_id_for(run_type, i.start), run_type, now, start_delay)
        for i in intervals
    ]
    return sql.execute_many(conn, q.INSERT_RUNS, rows)


def _run_row(
    spec: DagSpec,
    interval: DataInterval,
    run_id: str,
    run_type: RunType,
    now: datetime,
    start_delay: timedelta = timedelta(0),
    conf: dict | None = None,
) -> dict:
    return {
        "b_dag_id": spec.dag_id,
        "b_run_id": run_id,
        "b_logical_date": interval.start,
        "b_data_interval_start": interval.start,
        "b_data_interval_end": interval.end,
        "b_run_type": run_type.value,
        "b_state": RunState.WAITING.value,
        "b_conf": json.dumps(conf) if conf else None,
        "b_not_before": interval.end + start_delay if start_delay else None,
        "b_created_at": now,
    }


def create_manual_run(
    conn: Connection,
    spec: DagSpec,
    interval: DataInterval,
    run_id: str,
    now: datetime,
    conf: dict | None = None,
    start_at: datetime | None = None,
) -> tuple[int, bool]:
    """A manual run for ``interval``, not started before ``start_at``; returns (run pk,
    created). Manual runs are unique by run id: an existing key makes nothing and names its
    run (the caller holds the DAG lock, so two triggers of one key make one run)."""
    existing = sql.scalar(
        conn, run_reads.Q.RUN_BY_KEY, {"b_dag_id": spec.dag_id, "b_run_id": run_id}
    )
    if existing is not None:
        return existing, False
    row = _run_row(spec, interval, run_id, RunType.MANUAL, now, conf=conf)
    row["b_not_before"] = start_at
    return sql.scalar(conn, q.INSERT_MANUAL_RUN, row), True


def run_facts(
    conn: Connection, run_pks: Iterable[int], known: dict[int, Any] | None = None
) -> dict[int, Any]:
    """What work on some runs needs of them (run id, dates, conf) by run pk: from
    ``known``, a caller's cache (they never change once a run exists), reading the others
    into it."""
    known = {} if known is None else known
    if len(known) > 1_000:  # runs others ended: a long-lived worker keeps what is running
        known.clear()
    missing = sorted(set(run_pks) - known.keys())
    if missing:
        found = sql.rows(conn, run_reads.Q.CLAIMED_RUNS, {"b_run_pks": missing})
        known.update((r.id, r) for r in found)
    return known


def set_cursor(conn: Connection, dag_id: str, next_logical_date: datetime | None) -> None:
    """Advance the scheduler's per-DAG cursor: the next logical date it will consider."""
    sql.execute(conn, q.SET_CURSOR, {"b_dag_id": dag_id, "b_cursor": next_logical_date})


def count_active_runs(conn: Connection, dag_id: str) -> int:
    return sql.scalar(conn, run_reads.Q.COUNT_ACTIVE_RUNS, {"b_dag_id": dag_id})


def count_waiting_runs(conn: Connection, dag_id: str, now: datetime) -> int:
    """The DAG's runs waiting for a slot now (not those delayed to later)."""
    return len(sql.tuples(conn, run_reads.Q.WAITING_RUNS, {"b_dag_id": dag_id, "b_now": now}))


def admit_runs(
    conn: Connection,
    spec: DagSpec,
    max_active: int,
    now: datetime,
    *,
    newest_first: bool = False,
    run_pks: Collection[int] | None = None,
    limit: int | None = None,
) -> list[int]:
    """Move waiting runs to queued while queued + running stays within ``max_active``, at
    most ``limit`` of them.

    Oldest logical date first (newest first for ``backfill --reverse``). ``run_pks`` limits
    admission to those runs (a backfill admits its own). Task instances are created here,
    so a task added to the DAG since the run was made is part of the run when it starts.
    A DAG with ``depends_on_past`` tasks admits one run at a time, once the run before it
    has those tasks succeeded or skipped: a run must not hold a slot waiting on a past that
    may still fail (clearing that past would then wait for the slot forever). The caller
    holds the DAG lock.
    """
    free = max_active - count_active_runs(conn, spec.dag_id)
    if limit is not None:
        free = min(free, limit)
    admitted = admissible(conn, spec, free, now, newest_first=newest_first, run_pks=run_pks)
    if admitted:
        _lock_in_order(conn, spec, admitted, now)
        sql.execute_many(conn, q.ADMIT_RUN, [{"b_run_pk": pk} for pk in sorted(admitted)])
        ensure_task_instances(conn, spec, admitted)
    return admitted


def _lock_in_order(conn: Connection, spec: DagSpec, admitted: list[int], now: datetime) -> None:
    """Lock the runs about to be admitted with the ones about to start, in id order, before
    changing any: admitting (newer runs) and then starting (older ones) would otherwise lock
    rows out of order, and deadlock with a commit locking the same runs in order."""
    due = sql.scalars(conn, run_reads.Q.DUE_RUNS, {"b_dag_id": spec.dag_id, "b_now": now})
    sql.tuples(conn, q.LOCK_RUNS, {"b_run_pks": sorted({*admitted, *due})})


def admissible(
    conn: Connection,
    spec: DagSpec,
    free: int,
    now: datetime,
    *,
    newest_first: bool = False,
    run_pks: Collection[int] | None = None,
) -> list[int]:
    """The waiting runs admission would take into ``free`` slots (see ``admit_runs``)."""
    if free <= 0:
        return []
    on_past = [t.task_id for t in spec.tasks if t.depends_on_past]
    found = _next_waiting(conn, spec.dag_id, 1 if on_past else free, now, newest_first, run_pks)
    if on_past and found and not _past_done(conn, spec.dag_id, found[0], on_past):
        return []
    return found


def _next_waiting(
    conn: Connection,
    dag_id: str,
    free: int,
    now: datetime,
    newest_first: bool,
    wanted: Collection[int] | None,
) -> list[int]:
    """The first ``free`` waiting runs in admission order (among ``wanted`` if given: a set,
    as a backfill's thousands of runs are tested one by one), read only as far as needed: a
    backfill admits a few runs at a time out of thousands, at every commit."""
    statement = run_reads.Q.WAITING_RUNS_NEWEST if newest_first else run_reads.Q.WAITING_RUNS
    cursor = sql.execute(conn, statement, {"b_dag_id": dag_id, "b_now": now})
    found: list[int] = []
    try:
        for (pk,) in cursor:
            if wanted is None or pk in wanted:
                found.append(pk)
                if len(found) == free:
                    break
    finally:
        cursor.close()
    return found


def ensure_task_instances(conn: Connection, spec: DagSpec, run_pks: list[int]) -> None:
    """Insert the missing task instances (state none) of each run."""
    rows = [_task_row(spec, t, pk) for pk in run_pks for t in spec.tasks if not t.mapped]
    sql.execute_many(conn, q.INSERT_TASK_INSTANCES, rows)
    if spec.mapped_ids:
        rows = [_task_row(spec, t, pk) for pk in run_pks for t in spec.tasks if t.mapped]
        sql.execute_many(conn, q.INSERT_MAPPED_TASK_INSTANCES, rows)


def _task_row(spec: DagSpec, task: TaskSpec, run_pk: int, map_index: int = -1) -> dict:
    return {
        "b_run_pk": run_pk,
        "b_dag_id": spec.dag_id,
        "b_task_id": task.task_id,
        "b_state": TaskState.NONE.value,
        "b_max_tries": task.max_tries,
        "b_priority_weight": task.priority_weight,
        "b_pool": task.pool,
        "b_capped": spec.max_active_tasks is not None,
        "b_map_index": map_index,
    }


def start_runs(conn: Connection, spec: DagSpec, now: datetime) -> list[int]:
    """Queued runs whose start time (``spread``) has come become running; roots get queued."""
    due = sql.scalars(conn, run_reads.Q.DUE_RUNS, {"b_dag_id": spec.dag_id, "b_now": now})
    if due:
        sql.execute_many(conn, q.START_RUN, [{"b_run_pk": pk, "b_now": now} for pk in due])
        advance_runs(conn, dict.fromkeys(due, spec), now)
    return due


def admit_and_start(
    conn: Connection,
    spec: DagSpec,
    now: datetime,
    *,
    max_active: int | None = None,
    newest_first: bool = False,
    run_pks: Collection[int] | None = None,
) -> list[int]:
    """Under the DAG lock, admit waiting runs within the limit (the DAG's
    ``max_active_runs`` unless given) and start the due ones; the runs started."""
    lock_dag(conn, spec.dag_id)
    limit = spec.max_active_runs if max_active is None else max_active
    admit_runs(conn, spec, limit, now, newest_first=newest_first, run_pks=run_pks)
    return start_runs(conn, spec, now)


# ---------------------------------------------------------------- readiness


def advance_runs(
    conn: Connection,
    runs: dict[int, DagSpec],
    now: datetime,
    ended: Mapping[int, Collection[str]] | None = None,
    *,
    announce: bool = True,
) -> dict[int, Decisions]:
    """Apply the trigger rules to running runs: queue ready tasks, end the runs that are done.

    The one place task readiness is decided. Locks the run rows first (in id order, so two
    lockers never deadlock), so two workers finishing the two upstreams of one task at once
    both see each other's result and the task is queued exactly once. One read of the runs
    and one of their task instances serve every run a group commit touched.

    ``ended`` names, for some of the runs, the only tasks whose state changed since
    readiness was last decided (a group commit's finished attempts): only their downstream
    tasks can have become ready, so only those are decided (``_decide_after``), and a run
    of thousands of tasks costs a commit what a small one does. Every other run is decided
    from all its task instances.

    Queued tasks are announced to listening workers (``announce_work``) unless
    ``announce`` is False: a worker's group commit claims in the same transaction, and
    announces only what it leaves queued.
    """
    pks = sorted(runs)
    if not pks:
        return {}
    locked = dict(sql.tuples(conn, q.LOCK_RUNS, {"b_run_pks": pks}))
    running = [pk for pk in pks if locked.get(pk) == RunState.RUNNING.value]
    ended = ended or {}
    decided = _decide_after(conn, runs, {pk: ended[pk] for pk in running if pk in ended})
    rest = [pk for pk in running if pk not in decided]
    states = _task_states(conn, rest)
    for pk in rest:
        decided[pk] = _decide(conn, runs[pk], pk, states[pk])
    again = _apply(conn, decided, runs, now, announce)
    _end_runs(conn, decided, runs, states, now)
    if again:  # a mapped task ended when it expanded: what follows it is decided now
        decided.update(advance_runs(conn, {pk: runs[pk] for pk in again}, now, announce=announce))
    return decided


def queued_by(
    decided: dict[int, Decisions], specs: dict[int, DagSpec]
) -> set[tuple[int, str]] | None:
    """What ``advance_runs`` queued, as (run pk, task id); None for a DAG with mapped tasks
    (an expansion queues indexes; a run decided again keeps only its last decisions)."""
    if any(specs[pk].mapped_ids for pk in decided):
        return None
    return {(pk, task_id) for pk, d in decided.items() for task_id in d.queue}


def _decide(
    conn: Connection,
    spec: DagSpec,
    run_pk: int,
    states: dict[str, TaskState],
    only: Collection[str] | None = None,
) -> Decisions:
    past = _past_ok(conn, spec, run_pk) if _needs_past(spec, states) else None
    chosen = _choices(conn, spec, run_pk, states) if spec.choice_ids else None
    return evaluate(spec, states, past, choices=chosen, only=only)


def _decide_after(
    conn: Connection, runs: dict[int, DagSpec], ended: dict[int, Collection[str]]
) -> dict[int, Decisions]:
    """Readiness decided from the tasks that ended only: their downstream tasks, read with
    their upstream tasks (and the run's branch tasks). A run is left out, to be decided
    from all its tasks, when this pass would end a task (upstream_failed or skipped: that
    cascades further down) or when it queued nothing and the run has no task left
    unfinished (it ends, and its outcome needs every state)."""
    candidates = {pk: _downstream(runs[pk], ids) for pk, ids in ended.items()}
    needed = {
        t
        for pk, ids in candidates.items()
        for t in (*ids, *runs[pk].choice_ids, *_upstream(runs[pk], ids))
    }
    states = _task_states(conn, sorted(candidates), sorted(needed))
    decided = {
        pk: _decide(conn, runs[pk], pk, states[pk], only=ids) for pk, ids in candidates.items()
    }
    decided = {pk: d for pk, d in decided.items() if not (d.upstream_failed or d.skip)}
    idle = [pk for pk, d in decided.items() if not d.queue]
    left = sql.scalars(conn, run_reads.Q.RUNS_WITH_WORK_LEFT, {"b_run_pks": idle}) if idle else []
    busy = set(left)
    return {pk: d for pk, d in decided.items() if d.queue or pk in busy}


def _downstream(spec: DagSpec, task_ids: Iterable[str]) -> set[str]:
    """The tasks the end of ``task_ids`` may make ready: their direct downstream tasks, and
    the tasks further down in the scope of an ended setup (they wait for it as well)."""
    below = spec.downstream
    found = {d for t in task_ids for d in below.get(t, ())}
    if spec.setup_ids:
        scoped = spec.setup_dependants
        found.update(d for t in task_ids if t in scoped for d in scoped[t])
    return found


def _upstream(spec: DagSpec, task_ids: Iterable[str]) -> set[str]:
    """What deciding ``task_ids`` reads: their upstream tasks, and the setups whose scope
    they are in (readiness reads those too, ``readiness._with_setups``)."""
    tasks = spec.task_map
    found = {u for t in task_ids for u in tasks[t].upstream}
    if spec.setup_ids:
        scopes = spec.setup_scopes
        found.update(s for t in task_ids if t in scopes for s in scopes[t].indirect)
    return found


def _task_states(
    conn: Connection, run_pks: list[int], task_ids: list[str] | None = None
) -> dict[int, dict[str, TaskState]]:
    """Each run's task states by task id (of ``task_ids`` only, if given); a mapped task's
    is what its indexes add up to."""
    states: dict[int, dict[str, TaskState]] = {pk: {} for pk in run_pks}
    if not run_pks or task_ids == []:
        return states
    if task_ids is None:
        rows = sql.tuples(conn, run_reads.Q.RUN_TASK_STATES, {"b_run_pks": run_pks})
    else:
        params = {"b_run_pks": run_pks, "b_task_ids": task_ids}
        rows = sql.tuples(conn, run_reads.Q.SOME_TASK_STATES, params)
    for run_pk, task_id, state in rows:
        found = states[run_pk]
        known = found.get(task_id)
        found[task_id] = (
            _TASK_STATES[state] if known is None else merged(known, _TASK_STATES[state])
        )
    return states


def values_of(conn: Connection, run_pk: int, task_ids: Iterable[str]) -> dict[str, Any]:
    """The return values of some tasks of a run (JSON-decoded); a mapped task's as the list
    of its indexes' values, in index order."""
    task_ids = sorted(set(task_ids))
    if not task_ids:
        return {}
    found: dict[str, Any] = {}
    params = {"b_run_pk": run_pk, "b_task_ids": task_ids}
    for task_id, map_index, value in sql.tuples(conn, run_reads.Q.UPSTREAM_VALUES, params):
        decoded = json.loads(value) if value else None
        if map_index < 0:
            found[task_id] = decoded
        else:
            found.setdefault(task_id, []).append(decoded)
    return found


def _choices(
    conn: Connection, spec: DagSpec, run_pk: int, states: dict[str, TaskState]
) -> dict[str, frozenset[str] | None]:
    """What the run's succeeded branch and short-circuit tasks chose (see ``evaluate``): a
    branch, the downstream ids it returned; a short-circuit that returned a falsy value,
    None (skip all downstream). A truthy short-circuit chose nothing to skip."""
    done = [t for t in spec.choice_ids if states.get(t) == TaskState.SUCCESS]
    chosen: dict[str, frozenset[str] | None] = {}
    for task_id, value in values_of(conn, run_pk, done).items():
        if spec.task_map[task_id].choice == "branch":
            picked = [] if value is None else [value] if isinstance(value, str) else value
            chosen[task_id] = frozenset(picked)
        elif not value:
            chosen[task_id] = None
    return chosen


def next_run(conn: Connection, dag_id: str, run_pk: int) -> int | None:
    """The DAG's run after this one by logical date: its ``depends_on_past`` tasks may be
    ready once this run's instances of them end."""
    return sql.scalar(conn, run_reads.Q.NEXT_RUN, {"b_dag_id": dag_id, "b_run_pk": run_pk})


def announce_work(conn: Connection) -> None:
    """Tell listening workers, when this transaction commits, that tasks were queued
    (PostgreSQL's NOTIFY; one per transaction however often it is called)."""
    if capabilities(conn.dialect.name).notifies:
        sql.execute(conn, q.ANNOUNCE_WORK)


def _apply(
    conn: Connection,
    decided: dict[int, Decisions],
    specs: dict[int, DagSpec],
    now: datetime,
    announce: bool,
) -> set[int]:
    """Write the decisions of ``advance_runs``: one batched statement per kind of change;
    a mapped task to queue is expanded instead. Returns the runs where a mapped task ended
    as it expanded (an empty list, a bad value), to be decided again."""
    mapped = [(pk, t) for pk, d in decided.items() for t in d.queue if t in specs[pk].mapped_ids]
    changes = [
        (TaskState.QUEUED, q.QUEUE_TASK, lambda pk, d: _plain(d.queue, specs[pk])),
        (TaskState.UPSTREAM_FAILED, q.END_WAITING_TASK, lambda pk, d: d.upstream_failed),
        (TaskState.SKIPPED, q.END_WAITING_TASK, lambda pk, d: d.skip),
    ]
    queued, again = 0, set()
    for pk, task_id in mapped:
        expanded = _expand(conn, specs[pk], pk, task_id, now)
        queued += expanded
        if expanded == 0:
            again.add(pk)
    for state, statement, chosen in changes:
        rows = [
            {"b_run_pk": pk, "b_task_id": task_id, "b_state": state.value, "b_now": now}
            for pk, d in decided.items()
            for task_id in chosen(pk, d)
        ]
        if sql.execute_many(conn, statement, rows) and state == TaskState.QUEUED:
            queued += 1
    if queued and announce:
        announce_work(conn)
    return again


def _plain(task_ids: list[str], spec: DagSpec) -> list[str]:
    """The tasks that are not mapped (most DAGs have none that are: no copy then)."""
    if not spec.mapped_ids:
        return task_ids
    return [t for t in task_ids if t not in spec.mapped_ids]


def _expand(conn: Connection, spec: DagSpec, run_pk: int, task_id: str, now: datetime) -> int:
    """A mapped task is ready: make its instances 0..n-1 (the unexpanded one becomes 0) and
    queue those waiting. Mapped over an empty list it is skipped; over a value that is not
    a list it fails (its upstream should have failed instead, see ``runner``). Returns how
    many instances it queued."""
    task = spec.task_map[task_id]
    values = values_of(conn, run_pk, [source for _, source, _ in task.mapped if source])
    lengths: list[int] = []
    for name, source, known in task.mapped:
        if source is None:
            assert known is not None  # a literal list: its length is in the spec
            lengths.append(known)
            continue
        problem = mapping.problem(values.get(source))
        if problem:
            error = f"cannot expand {name}: the value of '{source}' {problem}"
            where = {"b_run_pk": run_pk, "b_task_id": task_id, "b_now": now, "b_error": error}
            sql.execute(conn, q.FAIL_WAITING_TASK, where)
            return 0
        lengths.append(len(values[source]))
    count = mapping.length(lengths)
    key = {"b_run_pk": run_pk, "b_task_id": task_id}
    if count == 0:
        params = {**key, "b_state": TaskState.SKIPPED.value, "b_now": now}
        sql.execute(conn, q.END_WAITING_TASK, params)
        return 0
    sql.execute(conn, q.NUMBER_PLACEHOLDER, key)
    rows = [_task_row(spec, task, run_pk, i) for i in range(count)]
    sql.execute_many(conn, q.INSERT_TASK_INSTANCES, rows)
    sql.execute(conn, q.DROP_INDEXES, {**key, "b_length": count, "b_now": now})
    return sql.execute(conn, q.QUEUE_INDEXES, {**key, "b_length": count, "b_now": now}).rowcount


def _end_runs(
    conn: Connection,
    decided: dict[int, Decisions],
    specs: dict[int, DagSpec],
    states: dict[int, dict[str, TaskState]],
    now: datetime,
) -> None:
    """End the runs whose every task finished. A run whose DAG has a callback for that end
    is ended on its own, and its event written only if this update changed the row: the
    event is written once, however many processes decided the same end."""
    ended = [(pk, d.run_state) for pk, d in decided.items() if d.run_state is not None]
    heard = [(pk, s) for pk, s in ended if callbacks.hears_run_end(specs[pk], s)]
    quiet = [
        {"b_run_pk": pk, "b_state": s.value, "b_now": now}
        for pk, s in ended
        if (pk, s) not in heard
    ]
    sql.execute_many(conn, q.END_RUN, quiet)
    for pk, state in heard:
        params = {"b_run_pk": pk, "b_state": state.value, "b_now": now}
        if sql.execute(conn, q.END_RUN, params).rowcount:
            error = None if state == RunState.SUCCESS else _failed_tasks(states[pk])
            event = callbacks.RUN_EVENTS[state]
            callbacks.enqueue_run_event(conn, specs[pk], pk, event, error, now)


def _failed_tasks(states: dict[str, TaskState]) -> str:
    """Why a run failed, for its failure callback: the tasks that failed."""
    failed = sorted(t for t, s in states.items() if s == TaskState.FAILED)
    return f"task(s) failed: {', '.join(failed)}" if failed else "task(s) failed"


def _needs_past(spec: DagSpec, states: dict[str, TaskState]) -> bool:
    """Whether a waiting task read depends on its past (the tasks read, not the DAG's)."""
    tasks = spec.task_map
    waiting = [t for t, state in states.items() if state == TaskState.NONE and t in tasks]
    return any(tasks[t].depends_on_past for t in waiting)


def _past_done(conn: Connection, dag_id: str, run_pk: int, task_ids: list[str]) -> bool:
    """Whether the run before ``run_pk`` has its instances of ``task_ids`` succeeded or
    skipped (a run with no past, or a past without them, passes)."""
    previous = sql.scalar(conn, run_reads.Q.PREVIOUS_RUN, {"b_dag_id": dag_id, "b_run_pk": run_pk})
    if previous is None:
        return True
    rows = sql.tuples(conn, run_reads.Q.RUN_TASK_STATES, {"b_run_pks": [previous]})
    return all(state in _PAST_OK for _, task_id, state in rows if task_id in task_ids)


def _past_ok(conn: Connection, spec: DagSpec, run_pk: int) -> dict[str, bool]:
    """For depends_on_past: did the previous run's instance of each task succeed or skip?"""
    key = {"b_dag_id": spec.dag_id, "b_run_pk": run_pk}
    previous = sql.scalar(conn, run_reads.Q.PREVIOUS_RUN, key)
    if previous is None:
        return {}
    rows = sql.tuples(conn, run_reads.Q.RUN_TASK_STATES, {"b_run_pks": [previous]})
    return {task_id: state in _PAST_OK for _, task_id, state in rows}

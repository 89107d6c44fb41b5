"""What operators do to runs by hand: clear tasks, cancel a run, mark a run or tasks.

Each change runs in the caller's write transaction under the run's row lock, the lock that
readiness is decided under (``runs.advance_runs``), so a hand change and a worker's commit
never interleave. A running task instance changed by hand loses its lease at once
(``STOP_TASKS``) and its attempt ends ``failed`` with the reason: the worker that held it
sees that within a second (``LeaseKeeper``) and stops the attempt's processes, and anything
the attempt reports afterwards is stale, rejected by its fence like any lost lease.

Downstream readiness follows a mark: the tasks downstream of a marked task that readiness
made ``upstream_failed`` or ``skipped`` are decided again by their trigger rules, so marking
a failed upstream ``success`` lets its downstream run; a finished run reopens for that (it
waits for a slot, as a cleared run does). A state set by hand stays until an operator marks
or clears that task again: each carries its reason as its note, which readiness's own
decisions never have (``statements.REEVALUATE_TASKS``). The statements are in
``statements.py``, the reads they decide from in ``run_reads``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from dagrun.parsing.scopes import with_setups_and_teardowns
from dagrun.parsing.spec import DagSpec
from dagrun.states import AttemptOutcome, CallbackEvent, RunState, TaskState
from dagrun.store import callbacks, run_reads, sql
from dagrun.store.attempts import log_params
from dagrun.store.catalogue import TRANSITIONS as q
from dagrun.store.readiness import counted_states, run_outcome
from dagrun.store.runs import advance_runs, ensure_task_instances

if TYPE_CHECKING:
    from sqlalchemy import Connection


#: Task states a hand change may overwrite without stopping anything.
_NOT_RUNNING = [s.value for s in TaskState if s != TaskState.RUNNING]
#: Unfinished task instances waiting to start, or to start again for a retry.
_NOT_STARTED = [s.value for s in (TaskState.NONE, TaskState.QUEUED, TaskState.UP_FOR_RETRY)]
#: Unfinished task instances that hold no attempt: those, and sensors between pokes.
_IDLE = [*_NOT_STARTED, TaskState.UP_FOR_RESCHEDULE.value]
_FINISHED_RUN = frozenset({RunState.SUCCESS.value, RunState.FAILED.value})


@dataclass(frozen=True)
class _Ending:
    """What ending a run by hand does to its task instances: the state its running ones
    take as they are stopped, and the states it sets, each from the states listed."""

    running: TaskState
    sets: tuple[tuple[TaskState, list[str]], ...]


#: Airflow's mark success: every task not succeeded or skipped succeeds, failed ones too,
#: so a successful run shows no failed task.
_MARK_SUCCESS = _Ending(
    TaskState.SUCCESS,
    ((TaskState.SUCCESS, [*_IDLE, TaskState.FAILED.value, TaskState.UPSTREAM_FAILED.value]),),
)
#: Airflow's mark failed: what runs, or waits between pokes, fails; what has not started
#: is skipped; finished tasks keep their state.
_MARK_FAILED = _Ending(
    TaskState.FAILED,
    (
        (TaskState.FAILED, [TaskState.UP_FOR_RESCHEDULE.value]),
        (TaskState.SKIPPED, _NOT_STARTED),
    ),
)
#: A cancel (or a run's timeout) stops what runs and skips everything else unfinished.
_CANCEL = _Ending(TaskState.FAILED, ((TaskState.SKIPPED, _IDLE),))


@dataclass(frozen=True)
class Change:
    """What a hand change did: the run's state before and after, the running attempts it
    stopped, the task instances it set, and whether a finished run reopened."""

    before: RunState
    after: RunState
    stopped: int = 0
    tasks: int = 0
    reopened: bool = False

    @property
    def changed(self) -> bool:
        return self.before != self.after or self.stopped > 0 or self.tasks > 0

    def detail(self) -> dict[str, object]:
        """What the audit log keeps of it."""
        return {"was": self.before.value, "stopped": self.stopped, "tasks": self.tasks}


def cancel_run(conn: Connection, spec: DagSpec, run_pk: int, now: datetime) -> Change:
    """Cancel an unfinished run: it becomes ``failed``, its running attempts are stopped
    (recorded ``failed``, error ``cancelled``) and its unstarted tasks ``skipped``. A
    finished run is left as it is."""
    before = _lock_run(conn, run_pk)
    if before.value in _FINISHED_RUN:
        return Change(before, before)
    return _end_run(conn, spec, run_pk, before, RunState.FAILED, _CANCEL, "cancelled", now)


def time_out_runs(conn: Connection, spec: DagSpec, now: datetime) -> int:
    """Fail the DAG's runs still unfinished ``dagrun_timeout`` seconds after they started:
    running attempts stopped as a cancel stops them, unstarted tasks skipped. Returns how
    many. The DAG's failure callback hears of each (a hand cancel or mark fires none)."""
    if spec.dagrun_timeout is None:
        return 0
    before = now - timedelta(seconds=spec.dagrun_timeout)
    late = sql.scalars(
        conn, run_reads.Q.RUNS_STARTED_BEFORE, {"b_dag_id": spec.dag_id, "b_before": before}
    )
    reason = f"dagrun_timeout: the run was unfinished {spec.dagrun_timeout:g} s after it started"
    ended = 0
    for run_pk in late:
        if _lock_run(conn, run_pk) == RunState.RUNNING:
            _end_run(conn, spec, run_pk, RunState.RUNNING, RunState.FAILED, _CANCEL, reason, now)
            callbacks.enqueue_run_event(conn, spec, run_pk, CallbackEvent.RUN_FAILURE, reason, now)
            ended += 1
    return ended


def mark_run(
    conn: Connection, spec: DagSpec, run_pk: int, state: RunState, reason: str, now: datetime
) -> Change:
    """Set a run's state by hand, as Airflow's mark success / mark failed do: ``success``
    stops its running attempts and makes every task that is unfinished or failed succeed;
    ``failed`` stops its running attempts and fails them and the sensors between pokes, and
    skips the tasks not started. Either way finished tasks of the other kinds keep their
    state, and each task it sets has ``reason`` as its note (a state set by hand, which
    readiness never overwrites)."""
    before = _lock_run(conn, run_pk)
    ending = _MARK_SUCCESS if state == RunState.SUCCESS else _MARK_FAILED
    return _end_run(conn, spec, run_pk, before, state, ending, reason, now)


def mark_tasks(
    conn: Connection,
    spec: DagSpec,
    run_pk: int,
    task_ids: set[str],
    state: TaskState,
    reason: str,
    now: datetime,
    map_index: int | None = None,
) -> Change:
    """Set task instances of a run to ``state`` by hand (running ones are stopped with
    ``reason``), decide the tasks downstream of them again, and settle the run: advance it
    if running, reopen it if finished and a task can run now, or give it the state its
    tasks now add up to. ``map_index`` picks one index of mapped tasks (else all)."""
    before = _lock_run(conn, run_pk)
    ensure_task_instances(conn, spec, [run_pk])
    chosen = sorted(task_ids)
    stopped = _stop(conn, run_pk, chosen, state, reason, now, map_index)
    params = {
        "b_run_pk": run_pk,
        "b_task_ids": chosen,
        "b_state": state.value,
        "b_now": now,
        "b_error": reason,
        **_index(map_index),
    }
    others = [s for s in _NOT_RUNNING if s != state.value]
    statement = q.MARK_TASKS if map_index is None else q.MARK_TASK_INDEX
    tasks = sql.execute(conn, statement, {**params, "b_from": others}).rowcount
    downstream = sorted(spec.descendants(task_ids) - task_ids)
    if downstream:
        sql.execute(conn, q.REEVALUATE_TASKS, {"b_run_pk": run_pk, "b_task_ids": downstream})
    after, reopened = _settle(conn, spec, run_pk, before, now)
    return Change(before, after, stopped, stopped + tasks, reopened)


def clear_runs(
    conn: Connection,
    spec: DagSpec,
    selection: Mapping[int, set[str] | None],
    now: datetime,
    map_index: int | None = None,
) -> tuple[int, int]:
    """Reset the chosen task instances of each run (all of them for None) so they run again;
    ``map_index`` picks one index of mapped tasks (else all of them).

    Clearing a task clears the setups whose scope it is in and their teardowns, and
    clearing a setup its teardowns (``scopes.with_setups_and_teardowns``), so the work
    runs again with its resource made again and torn down after.

    Tries count on across clears and each clear adds the task's tries to its most (as
    Airflow raises ``max_tries`` by the retries): a task of one retry that failed twice
    runs try 3 of 4 after a clear.

    Running instances are left alone (they finish or are reaped first). A finished run goes
    back to waiting for a slot; an active one re-evaluates at once. Returns (runs, tasks).
    """
    cleared_tasks = 0
    statement = q.CLEAR_TASKS if map_index is None else q.CLEAR_TASK_INDEX
    for run_pk, task_ids in sorted(selection.items()):
        ensure_task_instances(conn, spec, [run_pk])
        chosen = spec.task_map if task_ids is None else with_setups_and_teardowns(spec, task_ids)
        for tries, same in _by_tries(spec, chosen).items():
            params = {"b_run_pk": run_pk, "b_task_ids": same, "b_tries": tries}
            cleared_tasks += sql.execute(conn, statement, {**params, **_index(map_index)}).rowcount
        sql.execute(conn, q.REOPEN_RUN, {"b_run_pk": run_pk})
        advance_runs(conn, {run_pk: spec}, now)
    return len(selection), cleared_tasks


def _by_tries(spec: DagSpec, task_ids: Iterable[str]) -> dict[int, list[str]]:
    """The tasks grouped by how many tries a clear gives each: its retries + 1 (one for an
    old run's task since removed from the DAG)."""
    grouped: dict[int, list[str]] = {}
    for task_id in sorted(task_ids):
        task = spec.task_map.get(task_id)
        grouped.setdefault(task.max_tries if task else 1, []).append(task_id)
    return grouped


def _lock_run(conn: Connection, run_pk: int) -> RunState:
    """Lock the run row (readiness is decided under it) and read its state."""
    return RunState(sql.tuples(conn, q.LOCK_RUNS, {"b_run_pks": [run_pk]})[0][1])


def _set_run_state(
    conn: Connection, run_pk: int, was: RunState, state: RunState, now: datetime
) -> None:
    params = {"b_run_pk": run_pk, "b_was": was.value, "b_state": state.value, "b_end": now}
    sql.execute(conn, q.SET_RUN_STATE, params)


def _end_run(
    conn: Connection,
    spec: DagSpec,
    run_pk: int,
    before: RunState,
    state: RunState,
    ending: _Ending,
    reason: str,
    now: datetime,
) -> Change:
    """End a run in ``state`` by hand: its task instances stopped and set as ``ending``
    says, with ``reason``."""
    ensure_task_instances(conn, spec, [run_pk])
    every = sorted(spec.task_map)
    stopped = _stop(conn, run_pk, every, ending.running, reason, now)
    params = {"b_run_pk": run_pk, "b_task_ids": every, "b_now": now, "b_error": reason}
    tasks = stopped
    for task_state, sources in ending.sets:
        changed = {**params, "b_state": task_state.value, "b_from": sources}
        tasks += sql.execute(conn, q.MARK_TASKS, changed).rowcount
    if before != state:
        _set_run_state(conn, run_pk, before, state, now)
    return Change(before, state, stopped, tasks)


def _stop(
    conn: Connection,
    run_pk: int,
    task_ids: list[str],
    state: TaskState,
    reason: str,
    now: datetime,
    map_index: int | None = None,
) -> int:
    """Take running task instances away from their attempts: the task instance gets
    ``state``, the attempt ends ``failed`` with ``reason``. Returns how many were stopped."""
    params = {"b_run_pk": run_pk, "b_task_ids": task_ids, "b_now": now, **_index(map_index)}
    statement = q.STOP_TASKS if map_index is None else q.STOP_TASK_INDEX
    stopped = sql.tuples(conn, statement, {**params, "b_state": state.value, "b_error": reason})
    sql.execute_many(
        conn,
        q.END_ATTEMPT,
        [
            {
                "b_ti_id": ti_id,
                "b_fence": fence,
                "b_outcome": AttemptOutcome.FAILED.value,
                "b_error": reason,
                "b_now": now,
                **log_params(None),
            }
            for ti_id, fence in stopped
        ],
    )
    return len(stopped)


def _index(map_index: int | None) -> dict[str, int]:
    """The parameter of a statement picking one index of mapped tasks, if one is picked."""
    return {} if map_index is None else {"b_map_index": map_index}


def _settle(
    conn: Connection, spec: DagSpec, run_pk: int, before: RunState, now: datetime
) -> tuple[RunState, bool]:
    """The run after a task mark: a running run advances; a finished one reopens (waits
    for a slot) when a task can run again, or takes the state its tasks add up to. Returns
    its state and whether it reopened."""
    if before == RunState.RUNNING:
        decided = advance_runs(conn, {run_pk: spec}, now)[run_pk]
        return decided.run_state or RunState.RUNNING, False
    if before.value not in _FINISHED_RUN:
        return before, False
    rows = sql.tuples(conn, run_reads.Q.RUN_TASK_STATES, {"b_run_pks": [run_pk]})
    outcome = run_outcome(counted_states(spec, [(t, TaskState(state)) for _, t, state in rows]))
    if outcome is None:
        sql.execute(conn, q.REOPEN_RUN, {"b_run_pk": run_pk})
        return RunState.WAITING, True
    if outcome != before:
        _set_run_state(conn, run_pk, before, outcome, now)
    return outcome, False

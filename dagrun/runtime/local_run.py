"""One run driven in this process, through a store of its own: what ``dagrun test`` does.

A test must decide what a real run decides (branches, short-circuits, trigger rules,
mapping, sensors, skips, setups and teardowns), so it goes through the same store
functions as a worker: the run is made in a private SQLite store in a temporary folder,
its tasks are claimed, run here one at a time (a debugger or ``print`` works, logs go to the
terminal) and completed, and readiness decides what follows. Nothing is written to the
real store: its variables and connections are copied into the private one, so tasks read
them (and secrets are masked) as in a real run, ``ti.xcom_pull`` reads this run, and an
ExternalTaskSensor reads the other DAGs' runs in the real store.

Each task runs once (its retries would only wait); a sensor pokes once per attempt and
waits between pokes outside it, until its condition holds or it times out, so the task it
waits for runs meanwhile.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from dagrun.parsing.spec import DagSpec
from dagrun.runtime.connections import Connection
from dagrun.runtime.jobs import Jobs, outcome_of
from dagrun.runtime.runner import AttemptRequest, AttemptResult, DagCache, execute
from dagrun.states import RunState, TaskState
from dagrun.store import (
    Store,
    attempts,
    connections,
    registry,
    run_reads,
    runs,
    task_reads,
    upkeep,
    variables,
)
from dagrun.timing.timetable import DataInterval

OWNER = "dagrun-test"
#: How often a run waiting for a sensor's next poke looks again.
_WAIT = 0.2


@dataclasses.dataclass
class LocalRun:
    """What a test run ended as: the run's state and each task instance's (id, map index,
    state, try, error), in the DAG's order."""

    state: RunState
    tasks: list[task_reads.TaskRow]


def run_locally(
    source: Store,
    spec: DagSpec,
    interval: DataInterval,
    conf: dict[str, Any],
    on_start: Callable[[str, int], None],
    on_end: Callable[[str, int, AttemptResult], None],
) -> LocalRun:
    """Run ``spec`` for ``interval`` to its end in this process; ``on_start`` and
    ``on_end`` hear of each attempt (task id, map index, and its result)."""
    spec = _once_each(spec)
    with _private_store(source) as store:
        run_pk = _start(store, spec, interval, conf)
        jobs = Jobs(log_dir=None, db_url=store.url, callback_timeout=0, is_short=_never)
        cache = DagCache()
        while (state := _state(store, run_pk)).active:
            if not _run_one(store, source.url, spec, run_pk, jobs, cache, on_start, on_end):
                _wait_for_due(store, run_pk)
        with store.read() as conn:
            tasks = task_reads.task_instances(conn, [run_pk], [t.task_id for t in spec.tasks])
        return LocalRun(state, tasks)


def _never(dag_id: str, task_id: str) -> bool:
    return False


def _once_each(spec: DagSpec) -> DagSpec:
    """The DAG with no retries (a test runs each task once), its sensors waiting between
    pokes in reschedule mode (tasks run one at a time here: a sensor waiting in its
    attempt would hold up the task it waits for)."""
    tasks = tuple(
        dataclasses.replace(t, retries=0, sensor=t.sensor and t.sensor._replace(mode="reschedule"))
        for t in spec.tasks
    )
    return dataclasses.replace(spec, tasks=tasks)


@contextmanager
def _private_store(source: Store) -> Iterator[Store]:
    """A new SQLite store in a temporary folder, with ``source``'s variables and
    connections; removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="dagrun-test-") as folder:
        store = Store(f"sqlite:///{folder}/test.db")
        try:
            with source.read() as conn:
                found = variables.list_variables(conn), connections.list_connections(conn)
            with store.write() as conn:
                now = store.now(conn)
                for v in found[0]:
                    variables.set_variable(conn, v.key, v.value, v.description, now)
                for c in found[1]:
                    fields = Connection(**{k: v for k, v in c.items() if k != "description"})
                    connections.set_connection(conn, fields, c["description"], now)
            yield store
        finally:
            store.dispose()


def _start(store: Store, spec: DagSpec, interval: DataInterval, conf: dict[str, Any]) -> int:
    with store.write() as conn:
        now = store.now(conn)
        registry.save_dag(conn, spec, now)
        run_id = runs.run_id_for("test", interval.start)
        pk, _ = runs.create_manual_run(conn, spec, interval, run_id, now, conf)
        runs.admit_and_start(conn, spec, now, max_active=1, run_pks=[pk])
    return pk


def _state(store: Store, run_pk: int) -> RunState:
    with store.read() as conn:
        return RunState(run_reads.run_by_pk(conn, run_pk).state)


def _run_one(
    store: Store,
    history_url: str,
    spec: DagSpec,
    run_pk: int,
    jobs: Jobs,
    cache: DagCache,
    on_start: Callable[[str, int], None],
    on_end: Callable[[str, int, AttemptResult], None],
) -> bool:
    """Claim, run here and complete one task instance of the run; False if none is queued."""
    with store.write() as conn:
        claimed = attempts.claim(conn, OWNER, 1, 3600, store.now(conn), run_pks=[run_pk])
        if not claimed:
            return False
        job = jobs.for_attempt(conn, claimed[0], spec)
    claim = claimed[0]
    on_start(claim.task_id, claim.map_index)
    assert isinstance(job.request, AttemptRequest)  # an attempt's job, not a callback's
    request = dataclasses.replace(job.request, history_url=history_url, poke_once=True)
    result = execute(request, cache)
    on_end(claim.task_id, claim.map_index, result)
    with store.write() as conn:
        attempts.complete(conn, OWNER, [outcome_of(job, result)], lambda _: spec, store.now(conn))
    return True


def _wait_for_due(store: Store, run_pk: int) -> None:
    """Nothing is queued: a sensor waits for its next poke. Queue what is due, after a
    short wait when nothing is; a run with nothing to wait for cannot go on."""
    with store.write() as conn:
        now = store.now(conn)
        due = upkeep.requeue_pokes(conn, now) + upkeep.requeue_retries(conn, now)
        states = {t.state for t in task_reads.task_instances(conn, [run_pk])}
    if due:
        return
    if not states & _WAITING:
        raise RuntimeError(f"the test run cannot go on: its tasks are {sorted(states)}")
    time.sleep(_WAIT)


_WAITING = {TaskState.UP_FOR_RESCHEDULE.value, TaskState.UP_FOR_RETRY.value}

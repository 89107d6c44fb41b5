"""One run driven in this process, through a store of its own: what ``dagrun test`` and
``dagrun tasks test`` do.

A test must decide what a real run decides (branches, short-circuits, trigger rules,
mapping, sensors, skips, retries, setups and teardowns, ``dagrun_timeout``), so it goes
through the same store functions as a worker: the run is made in a private SQLite store in a
temporary folder, its tasks are claimed, run here one at a time (a debugger or ``print``
works, logs go to the terminal) and completed, and readiness decides what follows. Nothing
is written to the real store: its variables, connections and pools are copied into the
private one, so tasks read them (and secrets are masked) as in a real run, ``ti.xcom_pull``
reads this run, and an ExternalTaskSensor reads the other DAGs' runs in the real store.

Not the run driver (``runtime.driver``) on the private store: its worker runs attempts in
child processes with their logs in files, where a breakpoint cannot stop them. What decides
is the store's either way; what the driver adds (leases kept, admission within limits,
callbacks delivered) serves a store that others share, which this one is not, so callbacks
are not called here. ``dagrun test --record`` is a run by the driver on the real store.

A task retries as its DAG says, after its retry delay; a sensor pokes once per attempt and
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

import networkx as nx

from dagrun.errors import LocalRunStuck
from dagrun.parsing.scopes import with_setups_and_teardowns
from dagrun.parsing.spec import DagSpec
from dagrun.runtime.connections import Connection
from dagrun.runtime.jobs import Jobs, outcome_of
from dagrun.runtime.requests import AttemptRequest, AttemptResult
from dagrun.runtime.runner import DagCache, execute
from dagrun.states import RunState, TaskState
from dagrun.store import (
    Store,
    attempts,
    connections,
    dag_reads,
    operator_actions,
    pools,
    registry,
    run_reads,
    runs,
    task_reads,
    upkeep,
    variables,
)
from dagrun.timing.timetable import DataInterval

OWNER = "dagrun-test"
#: How often a run waiting for a sensor's next poke or a retry looks again.
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
    task_id: str | None = None,
) -> LocalRun:
    """Run ``spec`` for ``interval`` to its end in this process; with ``task_id``, that task
    and what it needs (``needed_for``) only, its attempts in Airflow's ``test_mode`` as
    ``tasks test`` runs them. ``on_start`` and ``on_end`` hear of each attempt (task id, map
    index, and its result)."""
    spec = _poking_once(spec if task_id is None else needed_for(spec, task_id))
    with _private_store(source) as store:
        run_pk = _start(store, spec, interval, conf)
        jobs = Jobs(log_dir=None, db_url=store.url, callback_timeout=0, is_short=_never)
        cache = DagCache()
        request = {"history_url": source.url, "poke_once": True, "test_mode": task_id is not None}
        while (state := _state(store, spec, run_pk)).active:
            if not _run_one(store, spec, run_pk, jobs, cache, request, on_start, on_end):
                _wait_for_due(store, spec, run_pk)
        with store.read() as conn:
            tasks = task_reads.task_instances(conn, [run_pk], [t.task_id for t in spec.tasks])
        return LocalRun(state, tasks)


def needed_for(spec: DagSpec, task_id: str) -> DagSpec:
    """The part of the DAG that decides whether and how ``task_id`` runs (Airflow's partial
    subset): the task and everything upstream of it, whose states and values its trigger
    rule, a branch or short-circuit above it, its mapping and its inputs read; with the
    teardowns of the setups among them, so what a setup makes is removed again. Edges to the
    tasks left out are dropped (a teardown then waits for the part that runs)."""
    keep = with_setups_and_teardowns(spec, nx.ancestors(spec.graph(), task_id) | {task_id})
    tasks = tuple(
        dataclasses.replace(t, upstream=tuple(u for u in t.upstream if u in keep))
        for t in spec.tasks
        if t.task_id in keep
    )
    labels = tuple(e for e in spec.edge_labels if e[0] in keep and e[1] in keep)
    return dataclasses.replace(spec, tasks=tasks, edge_labels=labels)


def _never(dag_id: str, task_id: str) -> bool:
    return False


def _poking_once(spec: DagSpec) -> DagSpec:
    """The DAG with its sensors in reschedule mode: tasks run one at a time here, so a
    sensor pokes once per attempt and waits outside it (a sensor waiting in its attempt
    would hold up the task it waits for), and the store judges its timeout from its first
    poke, as it does for a rescheduled sensor."""
    tasks = tuple(
        dataclasses.replace(t, sensor=t.sensor and t.sensor._replace(mode="reschedule"))
        for t in spec.tasks
    )
    return dataclasses.replace(spec, tasks=tasks)


@contextmanager
def _private_store(source: Store) -> Iterator[Store]:
    """A new SQLite store in a temporary folder, with ``source``'s variables, connections
    and pools; removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="dagrun-test-") as folder:
        store = Store(f"sqlite:///{folder}/test.db", direct=True)
        try:
            _copy_settings(source, store)
            yield store
        finally:
            store.dispose()


def _copy_settings(source: Store, store: Store) -> None:
    """What tasks read of the store besides their run: variables, connections, and the
    pools that hold tasks back (a task of a pool nobody created cannot run here either)."""
    with source.read() as conn:
        found_variables = variables.list_variables(conn)
        found_connections = connections.list_connections(conn)
        found_pools = [p for p in dag_reads.pool_rows(conn) if p.exists]
    with store.write() as conn:
        now = store.now(conn)
        for v in found_variables:
            variables.set_variable(conn, v.key, v.value, v.description, now)
        for c in found_connections:
            fields = Connection(**{k: v for k, v in c.items() if k != "description"})
            connections.set_connection(conn, fields, c["description"], now)
        for p in found_pools:
            assert p.slots is not None  # a pool that exists has its slots
            pools.set_pool(conn, p.name, p.slots, p.description)


def _start(store: Store, spec: DagSpec, interval: DataInterval, conf: dict[str, Any]) -> int:
    with store.write() as conn:
        now = store.now(conn)
        registry.save_dag(conn, spec, now)
        run_id = runs.run_id_for("test", interval.start)
        pk, _ = runs.create_manual_run(conn, spec, interval, run_id, now, conf)
        runs.admit_and_start(conn, spec, now, max_active=1, run_pks=[pk])
    return pk


def _state(store: Store, spec: DagSpec, run_pk: int) -> RunState:
    """The run's state, once a run past its ``dagrun_timeout`` is failed as a driver fails it."""
    with store.write() as conn:
        operator_actions.time_out_runs(conn, spec, store.now(conn))
        return RunState(run_reads.run_by_pk(conn, run_pk).state)


def _run_one(
    store: Store,
    spec: DagSpec,
    run_pk: int,
    jobs: Jobs,
    cache: DagCache,
    request: dict[str, Any],
    on_start: Callable[[str, int], None],
    on_end: Callable[[str, int, AttemptResult], None],
) -> bool:
    """Claim, run here and complete one task instance of the run, its request with the
    fields ``request`` gives; False if none is queued."""
    with store.write() as conn:
        claimed = attempts.claim(conn, OWNER, 1, 3600, store.now(conn), run_pks=[run_pk])
        if not claimed:
            return False
        job = jobs.for_attempt(conn, claimed[0], spec)
    claim = claimed[0]
    on_start(claim.task_id, claim.map_index)
    assert isinstance(job.request, AttemptRequest)  # an attempt's job, not a callback's
    result = execute(dataclasses.replace(job.request, **request), cache)
    on_end(claim.task_id, claim.map_index, result)
    with store.write() as conn:
        attempts.complete(conn, OWNER, [outcome_of(job, result)], lambda _: spec, store.now(conn))
    return True


def _wait_for_due(store: Store, spec: DagSpec, run_pk: int) -> None:
    """Nothing is queued: a sensor waits for its next poke, or a task for its retry. Queue
    what is due, after a short wait when nothing is; a run with nothing to wait for cannot
    go on."""
    with store.write() as conn:
        now = store.now(conn)
        due = upkeep.requeue_pokes(conn, now) + upkeep.requeue_retries(conn, now)
        tasks = task_reads.task_instances(conn, [run_pk])
    if due:
        return
    if not {t.state for t in tasks} & _WAITING:
        raise _stuck(spec, tasks)
    time.sleep(_WAIT)


_WAITING = {TaskState.UP_FOR_RESCHEDULE.value, TaskState.UP_FOR_RETRY.value}


def _stuck(spec: DagSpec, tasks: list[task_reads.TaskRow]) -> LocalRunStuck:
    """Why nothing can run: queued tasks whose pool has no slot (or does not exist)."""
    queued = [t.task_id for t in tasks if t.state == TaskState.QUEUED.value]
    held = sorted({p for t in queued if (p := spec.task_map[t].pool)})
    if held:
        names = ", ".join(f"'{p}'" for p in held)
        reason = (
            f"its queued tasks ({', '.join(sorted(set(queued)))}) wait for pool {names}, "
            "with no slot or not created (see `dagrun pools list`; `dagrun pools set NAME SLOTS`)"
        )
    else:
        reason = "its tasks are " + ", ".join(sorted({t.state for t in tasks}))
    return LocalRunStuck(spec.dag_id, reason)

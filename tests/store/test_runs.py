"""Readiness after a commit (``runs.advance_runs`` given the tasks that ended): it decides
what deciding from every task instance decides, and it costs a commit the same in a run of
any size."""

from __future__ import annotations

import random
from itertools import pairwise

import pytest
from sqlalchemy import select, update

from dagrun import DAG, BashTask
from dagrun.parsing.loader import build_spec
from dagrun.parsing.spec import DagSpec
from dagrun.states import FINISHED_TASK_STATES, RunState, RunType, TaskState, TriggerRule
from dagrun.store import Store, runs
from dagrun.store.schema import dag_run, task_instance
from tests.store.test_store import days, register

ti = task_instance
ENDS = [TaskState.SUCCESS, TaskState.SUCCESS, TaskState.FAILED, TaskState.SKIPPED]


def random_spec(rng: random.Random, dag_id: str) -> DagSpec:
    """2 to 9 tasks, each with a random trigger rule and up to three random upstreams."""
    size = rng.randint(2, 9)
    with DAG(dag_id, schedule="@daily", start_date="2026-01-01", max_active_runs=2) as dag:
        tasks = [
            BashTask(f"t{i}", command="echo", trigger_rule=rng.choice(list(TriggerRule)))
            for i in range(size)
        ]
        for j in range(1, size):
            for i in rng.sample(range(j), k=min(j, rng.randint(0, 3))):
                tasks[i] >> tasks[j]
    return build_spec(dag, f"/d/{dag_id}.py")


def chain_spec(dag_id: str, length: int) -> DagSpec:
    with DAG(dag_id, schedule="@daily", start_date="2026-01-01") as dag:
        tasks = [BashTask(f"t{i:04d}", command="echo") for i in range(length)]
        for before, after in pairwise(tasks):
            before >> after
    return build_spec(dag, f"/d/{dag_id}.py")


def started_runs(store: Store, spec: DagSpec, count: int) -> list[int]:
    register(store, spec)
    with store.write() as conn:
        now = store.now(conn)
        runs.create_runs(conn, spec, days(count), RunType.SCHEDULED, now)
        runs.admit_runs(conn, spec, count, now)
        return sorted(runs.start_runs(conn, spec, now))


def states_of(store: Store, run_pk: int) -> tuple[dict[str, str], str]:
    with store.read() as conn:
        rows = conn.execute(select(ti.c.task_id, ti.c.state).where(ti.c.run_pk == run_pk))
        run = conn.execute(select(dag_run.c.state).where(dag_run.c.id == run_pk)).scalar_one()
        return dict(rows.all()), run


def end_task(conn, run_pk: int, task_id: str, state: TaskState) -> None:
    where = (ti.c.run_pk == run_pk, ti.c.task_id == task_id)
    conn.execute(update(ti).where(*where).values(state=state.value))


@pytest.mark.slow
def test_deciding_from_the_ended_tasks_decides_what_deciding_from_all_does(store: Store):
    """Two runs of a random DAG end the same tasks the same way, one decided from the task
    that ended, the other from every task: their states stay equal at every step (every
    trigger rule, failures and skips cascading) and both runs end the same way."""
    finished = {s.value for s in FINISHED_TASK_STATES}
    for seed in range(30):
        rng = random.Random(seed)
        spec = random_spec(rng, f"random_{seed}")
        after, every = started_runs(store, spec, 2)
        while True:
            tasks, run = states_of(store, after)
            assert (tasks, run) == states_of(store, every), f"seed {seed}"
            queued = sorted(t for t, s in tasks.items() if s == TaskState.QUEUED.value)
            if not queued:
                break
            task_id, state = rng.choice(queued), rng.choice(ENDS)
            with store.write() as conn:
                end_task(conn, after, task_id, state)
                end_task(conn, every, task_id, state)
                now = store.now(conn)
                runs.advance_runs(conn, {after: spec}, now, {after: {task_id}})
                runs.advance_runs(conn, {every: spec}, now)
        assert set(tasks.values()) <= finished, f"seed {seed}: {tasks}"
        assert run in (RunState.SUCCESS.value, RunState.FAILED.value), f"seed {seed}"


def statement_steps(store: Store, spec: DagSpec, run_pk: int, task_id: str) -> int:
    """SQLite virtual-machine steps (in hundreds) that deciding a run after ``task_id``
    succeeded costs: the rows the decision reads show up here."""
    steps = [0]

    def count() -> int:
        steps[0] += 1
        return 0

    with store.write() as conn:
        end_task(conn, run_pk, task_id, TaskState.SUCCESS)
        raw = conn.connection.dbapi_connection
        raw.set_progress_handler(count, 100)
        try:
            runs.advance_runs(conn, {run_pk: spec}, store.now(conn), {run_pk: {task_id}})
        finally:
            raw.set_progress_handler(None, 100)
    return steps[0]


def test_a_commit_in_a_long_run_costs_what_one_in_a_short_run_does(sqlite_store: Store):
    """A chain of 3,000 tasks read every instance at every commit (quadratic in the run's
    size: 3.1 ms per task at 1,500 against 1.4 at 100); now a commit reads the task that
    ended and the tasks below it."""
    short, long = chain_spec("short", 20), chain_spec("long", 3_000)
    (short_pk,) = started_runs(sqlite_store, short, 1)
    (long_pk,) = started_runs(sqlite_store, long, 1)
    near = statement_steps(sqlite_store, short, short_pk, "t0000")
    far = statement_steps(sqlite_store, long, long_pk, "t0000")
    assert far <= near + 2, (near, far)
    tasks, run = states_of(sqlite_store, long_pk)
    assert tasks["t0001"] == TaskState.QUEUED.value and run == RunState.RUNNING.value
    assert sum(s == TaskState.NONE.value for s in tasks.values()) == 2_998

"""Run limits with a real ``dagrun scheduler``: a bounded backlog without catchup, and
``dagrun_timeout`` failing a run and stopping its attempt's processes. Measured from what
the store recorded, waited on with deadlines."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from sqlalchemy import func, select

from dagrun.store import Store
from dagrun.store.schema import dag_run, task_attempt
from tests.helpers import (
    most_at_once,
    process_gone,
    queue_run,
    start_cli,
    stop_process,
    wait_until,
    write_dag,
)

pytestmark = pytest.mark.slow

PERIODIC = """
import time
from datetime import timedelta
from dagrun import DAG, task

with DAG("{dag_id}", schedule=timedelta(seconds={every}), start_date="2026-01-01",
         catchup=False, max_active_runs={at_once}):
    @task
    def slow():
        time.sleep(4)

    slow()
"""
# A run every 2 s whose task takes 4 s: without a bound, waiting runs pile up.
FAST_SCHEDULE = PERIODIC.format(dag_id="fast", every=2, at_once=1)
# A run every second, three at once, whose task takes 4 s: a stop takes that long.
EVERY_SECOND = PERIODIC.format(dag_id="every_second", every=1, at_once=3)

# A run that may last 3 s whose shell sleeps for a minute, writing its pid first.
TIMED_OUT = """
from dagrun import DAG, BashTask

with DAG("overdue", schedule=None, dagrun_timeout=3):
    BashTask("hang", command="echo $$ > {pid_file}; sleep 60") >> BashTask("after", command="true")
"""


# Eight half-second tasks of a DAG that lets two run at once.
CAPPED = """
import time
from dagrun import DAG, task

with DAG("capped", schedule=None, max_active_tasks=2):
    @task
    def work():
        time.sleep(0.5)

    for _ in range(8):
        work()
"""


@pytest.fixture
def store(cli_env: dict[str, str]):
    Path(cli_env["DAGRUN_HOME"]).mkdir(parents=True, exist_ok=True)
    s = Store(cli_env["DAGRUN_DB_URL"])
    yield s
    s.dispose()


def scheduler(env: dict[str, str], tmp_path: Path):
    return start_cli(
        "scheduler", "--workers", "2", "--poll", "0.2", env=env, log=tmp_path / "scheduler.log"
    )


def states(store: Store) -> list[str]:
    with store.read() as conn:
        return list(conn.execute(select(dag_run.c.state).order_by(dag_run.c.id)).scalars())


def test_without_catchup_the_backlog_never_grows_past_max_active_runs(
    cli_env, dags_dir, store, tmp_path
):
    write_dag(dags_dir, "fast.py", FAST_SCHEDULE)
    process = scheduler(cli_env, tmp_path)
    seen: list[list[str]] = []
    try:

        def two_runs_done() -> bool:
            now = states(store)
            seen.append(now)
            return now.count("success") >= 2

        wait_until(two_runs_done, 60, interval=0.1, what="two runs of the fast DAG to succeed")
    finally:
        stop_process(process)
    assert seen and all(
        s.count("waiting") + s.count("queued") + s.count("running") <= 1 for s in seen
    ), seen
    with store.read() as conn:
        created = conn.execute(select(func.count()).select_from(dag_run)).scalar_one()
    assert created <= 3, f"{created} runs for ~10 s of a 2 s schedule whose runs take 4 s"


def test_a_stopping_scheduler_creates_no_run_while_its_workers_finish(
    cli_env, dags_dir, store, tmp_path
):
    """SIGTERM: the running task finishes (a clean stop), and no run is made meanwhile,
    though runs fall due every second with slots free (a tick in flight may end)."""
    write_dag(dags_dir, "every_second.py", EVERY_SECOND)
    process = scheduler(cli_env, tmp_path)
    try:
        wait_until(lambda: attempt_count(store) >= 1, 30, what="a task to start")
        before = len(states(store))
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0, (tmp_path / "scheduler.log").read_text()
    finally:
        stop_process(process)
    assert len(states(store)) <= before + 1, states(store)
    assert "success" in states(store)


def attempt_count(store: Store) -> int:
    with store.read() as conn:
        return conn.execute(select(func.count()).select_from(task_attempt)).scalar_one()


def test_a_run_past_its_dagrun_timeout_fails_and_its_shell_is_stopped(
    cli_env, dags_dir, store, tmp_path
):
    pid_file = tmp_path / "hang.pid"
    write_dag(dags_dir, "overdue.py", TIMED_OUT.format(pid_file=pid_file))
    process = scheduler(cli_env, tmp_path)
    try:
        assert (
            start_cli(
                "trigger", "overdue", "--run-id", "r", env=cli_env, log=tmp_path / "t.log"
            ).wait(30)
            == 0
        )
        wait_until(lambda: states(store) == ["failed"], 30, what="the run to time out")
        with store.read() as conn:
            run = conn.execute(select(dag_run.c.start_date, dag_run.c.end_date)).one()
        assert 3 <= (run.end_date - run.start_date).total_seconds() < 10
        pid = int(wait_until(lambda: pid_file.exists() and pid_file.read_text().strip(), 5))

        wait_until(
            lambda: process_gone(pid), 15, what="the timed-out attempt's shell to be stopped"
        )
    finally:
        stop_process(process)
    with store.read() as conn:
        rows = conn.execute(
            select(task_attempt.c.task_id, task_attempt.c.outcome, task_attempt.c.error)
        ).all()
    assert [(r.task_id, r.outcome) for r in rows] == [("hang", "failed")]
    assert "dagrun_timeout" in rows[0].error


def test_max_active_tasks_holds_across_two_workers(db_url, dags_dir, tmp_path):
    """Two `dagrun worker` processes with two children each, on their own connections:
    never more than the cap at once, by the attempts' own recorded starts and ends."""
    store = Store(db_url)
    write_dag(dags_dir, "capped.py", CAPPED)
    run_pk = queue_run(store, dags_dir, "capped")
    env = {"DAGRUN_DB_URL": db_url, "DAGRUN_HOME": str(tmp_path / "home")}
    workers = [
        start_cli("worker", "-c", "2", "--poll", "0.1", env=env, log=tmp_path / f"w{i}.log")
        for i in range(2)
    ]
    try:

        def all_done() -> bool:
            with store.read() as conn:
                stmt = select(dag_run.c.state).where(dag_run.c.id == run_pk)
                return conn.execute(stmt).scalar_one() == "success"

        wait_until(all_done, 60, what="the capped run to finish")
        with store.read() as conn:
            spans = conn.execute(select(task_attempt.c.started_at, task_attempt.c.ended_at)).all()
    finally:
        for process in workers:
            stop_process(process)
        store.dispose()
    assert len(spans) == 8
    assert most_at_once(spans) == 2, "max_active_tasks=2 is the most that ran at once"

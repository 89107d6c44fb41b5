"""No process outlives the one that started it, and no slow parse costs a lease: a worker
SIGKILLed mid-BashTask takes its shell down with it; parse children, and whatever a DAG file
forks at import, end with their command; a backfill SIGKILLed leaves nothing running."""

from __future__ import annotations

import os
import signal
import time

import pytest
from sqlalchemy import select

from dagrun.store import Store
from dagrun.store.schema import task_attempt, task_instance
from tests.faults.invariants import leftovers, token_env
from tests.helpers import queue_run, run_cli, start_cli, stop_process, wait_until, write_dag

pytestmark = pytest.mark.slow


@pytest.fixture
def env(cli_env: dict[str, str], db_url: str) -> dict[str, str]:
    return {**cli_env, "DAGRUN_DB_URL": db_url, "DAGRUN_LEASE_SECONDS": "3", **token_env()}


def attempts(store: Store) -> list:
    with store.read() as conn:
        return conn.execute(select(task_attempt).order_by(task_attempt.c.id)).all()


def state(store: Store) -> str:
    with store.read() as conn:
        return conn.execute(select(task_instance.c.state)).scalar_one()


def test_a_worker_killed_mid_bash_task_leaves_no_shell_behind(env, dags_dir, tmp_path):
    marks = tmp_path / "marks"
    write_dag(
        dags_dir,
        "shell.py",
        f"""
        from dagrun import DAG, BashTask

        with DAG("shell", schedule=None):
            BashTask("slow", command="echo start $FENCE_TOKEN >> {marks}; sleep 4; "
                                     "echo end $FENCE_TOKEN >> {marks}")
        """,
    )
    store = Store(env["DAGRUN_DB_URL"])
    queue_run(store, dags_dir, "shell")
    first = start_cli("worker", "-c", "1", "--poll", "0.2", env=env, log=tmp_path / "a.log")
    try:
        wait_until(lambda: marks.exists() and "start 1" in marks.read_text(), 30, what="bash")
        os.kill(first.pid, signal.SIGKILL)  # the worker alone, not its process group
        first.wait(10)
        killed_at = time.time()
        wait_until(lambda: not leftovers(env), 10, what="the shell and its sleep to die")
    finally:
        stop_process(first)
    second = start_cli("worker", "-c", "1", "--poll", "0.2", env=env, log=tmp_path / "b.log")
    try:
        wait_until(lambda: state(store) == "success", 60, what="the task on the second worker")
    finally:
        stop_process(second)
    assert marks.read_text().split("\n")[:-1] == ["start 1", "start 2", "end 2"]
    old, new = attempts(store)
    assert (old.outcome, new.outcome) == ("lease_expired", "success")
    assert old.ended_at <= new.started_at  # no overlap: the first ended before the second ran
    assert old.ended_at.timestamp() >= killed_at - 1
    wait_until(lambda: not leftovers(env), 15, what="every process of the test to end")
    store.dispose()


FORKS_AT_IMPORT = """
import subprocess
from dagrun import DAG, BashTask

subprocess.Popen(["sleep", "60"])  # a DAG file that starts something at import

with DAG("forks", schedule=None):
    BashTask("t", command="true")
"""


def test_what_a_dag_file_forks_at_import_ends_with_the_parse(env, dags_dir):
    write_dag(dags_dir, "forks.py", FORKS_AT_IMPORT)
    listed = run_cli("dags", "list", env=env)
    assert listed.returncode == 0 and "forks" in listed.stdout, listed.stderr
    wait_until(lambda: not leftovers(env), 10, what="the sleep the DAG file started")


def test_a_file_that_needs_too_much_memory_is_an_import_error(env, dags_dir):
    write_dag(
        dags_dir,
        "greedy.py",
        """
        from dagrun import DAG, BashTask

        hoard = bytearray(300 * 1024 * 1024)

        with DAG("greedy", schedule=None):
            BashTask("t", command="true")
        """,
    )
    write_dag(dags_dir, "modest.py", FORKS_AT_IMPORT.replace('"forks"', '"modest"'))
    result = run_cli("dags", "errors", env={**env, "DAGRUN_PARSE_MEMORY_MB": "100"})
    assert result.returncode == 1, result.stdout + result.stderr
    assert "greedy.py" in result.stdout and "DAGRUN_PARSE_MEMORY_MB=100" in result.stdout
    assert "modest.py" not in result.stdout  # the other file is not hurt


def test_a_sigkilled_backfill_leaves_nothing_running(env, dags_dir, tmp_path):
    write_dag(
        dags_dir,
        "long.py",
        """
        import time
        from dagrun import DAG, BashTask, task

        with DAG("long", schedule="@daily", start_date="2026-01-01", max_active_runs=2):
            @task
            def nap():
                time.sleep(30)

            nap() >> BashTask("shell", command="sleep 30")
            BashTask("early", command="sleep 30")
        """,
    )
    assert run_cli("dags", "list", env=env).returncode == 0  # parsed: the backfill parses none
    backfill = start_cli(
        "backfill", "long", "--start", "2026-01-01", "--end", "2026-01-03", "--workers", "2",
        env=env, log=tmp_path / "backfill.log",
    )  # fmt: skip
    try:
        # the command, two worker children and a shell's sleep
        wait_until(lambda: len(leftovers(env)) >= 4, 30, what="the backfill's children at work")
        os.kill(backfill.pid, signal.SIGKILL)  # the command alone
        backfill.wait(10)
        wait_until(lambda: not leftovers(env), 10, what="children and shells to die")
    finally:
        stop_process(backfill)


def test_a_dag_file_that_hangs_at_import_costs_no_lease(env, dags_dir, tmp_path):
    """The embedded scheduler parses on its own thread: a file that hangs at import for
    longer than the lease does not stop the worker renewing its leases."""
    write_dag(
        dags_dir,
        "steady.py",
        """
        import time
        from dagrun import DAG, task

        with DAG("steady", schedule=None):
            @task
            def work():
                time.sleep(8)

            work()
        """,
    )
    store = Store(env["DAGRUN_DB_URL"])
    queue_run(store, dags_dir, "steady")
    env = {**env, "DAGRUN_PARSE_TIMEOUT": "20"}
    log = tmp_path / "scheduler.log"
    scheduler = start_cli("scheduler", "--workers", "1", "--poll", "0.2", env=env, log=log)
    try:
        wait_until(lambda: state(store) == "running", 30, what="the claim")
        write_dag(dags_dir, "hangs.py", "import time\ntime.sleep(15)\n")
        wait_until(lambda: state(store) == "success", 60, what="the task")
        assert scheduler.poll() is None, log.read_text()
    finally:
        stop_process(scheduler)
    assert [a.outcome for a in attempts(store)] == ["success"]
    assert "lease lost" not in log.read_text()
    wait_until(lambda: not leftovers(env), 20, what="every process of the test to end")
    store.dispose()


def test_processes_of_a_test_are_found(env, dags_dir, tmp_path):
    """The leftover check itself: a process started with the token is seen until it ends."""
    process = start_cli("worker", "-c", "1", env=env, log=tmp_path / "w.log")
    try:
        wait_until(lambda: len(leftovers(env)) >= 2, 30, what="the worker and its child")
    finally:
        stop_process(process)
    wait_until(lambda: not leftovers(env), 15, what="the worker and its child to end")

"""One Airflow DAG file gives Airflow's task states under every way dagrun runs it: `dagrun
test`, `run`, `backfill` and the scheduler, on SQLite and PostgreSQL (DESIGN 7.1). The file
branches, short-circuits without reaching past its direct downstream, skips by exception,
maps, joins by trigger rules and brackets work with a setup and a teardown."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.helpers import db_rows, run_cli, start_cli, stop_process, wait_until, write_dag

PATHS = """
import pendulum
from airflow import DAG
from airflow.decorators import task
from airflow.exceptions import AirflowSkipException
from airflow.operators.bash import BashOperator
from airflow.operators.empty import EmptyOperator
from airflow.operators.python import BranchPythonOperator, ShortCircuitOperator
from airflow.utils.trigger_rule import TriggerRule

with DAG(
    "paths",
    schedule="@daily",
    start_date=pendulum.today("UTC").add(days=-2),
    catchup=True,
    max_active_runs=2,
):
    start = EmptyOperator(task_id="start")
    branch = BranchPythonOperator(task_id="branch", python_callable=lambda: "fast")
    fast, slow = EmptyOperator(task_id="fast"), EmptyOperator(task_id="slow")
    after_slow = EmptyOperator(task_id="after_slow")
    join = EmptyOperator(task_id="join", trigger_rule=TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS)
    start >> branch >> [fast, slow]
    slow >> after_slow
    [fast, after_slow] >> join

    gate = ShortCircuitOperator(
        task_id="gate", python_callable=lambda: False, ignore_downstream_trigger_rules=False
    )
    gated = EmptyOperator(task_id="gated")
    cleanup = EmptyOperator(task_id="cleanup", trigger_rule="all_done")
    start >> gate >> gated >> cleanup

    @task
    def nothing():
        raise AirflowSkipException("no new data")

    @task(trigger_rule="none_skipped")
    def needs_all():
        return 1

    @task(trigger_rule=TriggerRule.ONE_DONE)
    def any_done():
        return 1

    nothing() >> [needs_all(), any_done()]

    @task
    def numbers():
        return [1, 2, 3]

    @task
    def square(n):
        return n * n

    @task
    def summed(values):
        return sum(values)

    summed(square.expand(n=numbers()))

    create = BashOperator(task_id="create", bash_command="echo made")
    work = BashOperator(task_id="work", bash_command="echo {{ ti.xcom_pull(task_ids='create') }}")
    delete = BashOperator(task_id="delete", bash_command="echo gone")
    create >> work >> delete.as_teardown(setups=create)
"""

#: What Airflow gives each task of PATHS (a mapped task's instances listed by index).
STATES = {
    ("start", -1): "success",
    ("branch", -1): "success",
    ("fast", -1): "success",
    ("slow", -1): "skipped",
    ("after_slow", -1): "skipped",
    ("join", -1): "success",
    ("gate", -1): "success",
    ("gated", -1): "skipped",
    ("cleanup", -1): "success",
    ("nothing", -1): "skipped",
    ("needs_all", -1): "skipped",
    ("any_done", -1): "skipped",
    ("numbers", -1): "success",
    ("square", 0): "success",
    ("square", 1): "success",
    ("square", 2): "success",
    ("summed", -1): "success",
    ("create", -1): "success",
    ("work", -1): "success",
    ("delete", -1): "success",
}


@pytest.fixture
def env(db_url: str, dags_dir: Path, cli_env: dict[str, str]) -> dict[str, str]:
    write_dag(dags_dir, "paths.py", PATHS)
    return {**cli_env, "DAGRUN_DB_URL": db_url}


def run_states(env: dict[str, str]) -> dict[str, dict[tuple[str, int], str]]:
    """Each run's task states by (task, map index), by run id."""
    rows = db_rows(
        env,
        "SELECT r.run_id, t.task_id, t.map_index, t.state FROM task_instance t "
        "JOIN dag_run r ON r.id = t.run_pk WHERE r.dag_id = 'paths'",
    )
    found: dict[str, dict[tuple[str, int], str]] = {}
    for run_id, task_id, index, state in rows:
        found.setdefault(run_id, {})[(task_id, index)] = state
    return found


def values(env: dict[str, str]) -> set[tuple[str, str]]:
    rows = db_rows(
        env,
        "SELECT task_id, return_value FROM task_instance "
        "WHERE task_id IN ('summed', 'work') AND return_value IS NOT NULL",
    )
    return {tuple(r) for r in rows}


def days_ago(n: int) -> str:
    return (datetime.now(UTC) - timedelta(days=n)).strftime("%Y-%m-%d")


def test_dagrun_test_gives_airflows_states_and_records_nothing(env):
    result = run_cli("test", "paths", days_ago(1), env=env, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    header = next(
        i for i, line in enumerate(lines) if line.split() == ["task_id", "index", "state"]
    )
    table = [line.split() for line in lines[header + 1 :]]
    shown = {(r[0], int(r[1]) if len(r) == 3 else -1): r[-1] for r in table}
    assert shown == STATES
    assert run_states(env) == {}


@pytest.mark.slow
def test_run_and_backfill_give_airflows_states(env):
    ran = run_cli("run", "paths", "--date", days_ago(2), env=env, timeout=120)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    filled = run_cli("backfill", "paths", "--start", days_ago(2), "--end", days_ago(1), env=env)
    assert filled.returncode == 0, filled.stdout + filled.stderr
    found = run_states(env)
    assert len(found) == 3, "a manual run and two backfilled days"
    assert all(states == STATES for states in found.values()), found
    assert values(env) == {("summed", "14"), ("work", '"made"')}


@pytest.mark.slow
def test_the_scheduler_gives_airflows_states(env, tmp_path):
    assert run_cli("db", "init", env=env).returncode == 0
    scheduler = start_cli("scheduler", "--workers", "2", env=env, log=tmp_path / "sched.log")
    try:

        def finished() -> bool:
            rows = db_rows(env, "SELECT state FROM dag_run WHERE dag_id = 'paths'")
            return len(rows) == 2 and all(state == "success" for (state,) in rows)

        wait_until(finished, timeout=90, what="the scheduler's two runs")
    finally:
        stop_process(scheduler)
    found = run_states(env)
    assert len(found) == 2 and all(states == STATES for states in found.values()), found

"""Sensors under a real ``dagrun scheduler`` on SQLite and PostgreSQL: a FileSensor waits,
holding nothing, until the test creates its file; a sensor times out; an
ExternalTaskSensor follows another DAG's run to its success or its failure. Measured from
what the store recorded, waited on with deadlines."""

from __future__ import annotations

from pathlib import Path

import pytest

from dagrun.store import Store
from tests.helpers import db_rows, run_cli, start_cli, stop_process, wait_until, write_dag

pytestmark = pytest.mark.slow

SENSORS = """
from dagrun import DAG, BashTask
from dagrun.runtime.sensors import ExternalTaskSensor, FileSensor

FOLDER = {folder!r}

with DAG("landing", schedule=None):
    landed = FileSensor(
        "landed", filepath=FOLDER + "/{{{{ ds }}}}.csv", poke_interval=0.2, timeout=120
    )
    landed >> BashTask("load", command="true")

with DAG("deadline", schedule=None):
    FileSensor("never", filepath=FOLDER + "/never", poke_interval=0.2, timeout=2, retries=2)

with DAG("upstream", schedule=None):
    gate = FileSensor("gate", filepath=FOLDER + "/go", poke_interval=0.2, timeout=120)
    gate >> BashTask("work", command="test ! -e " + FOLDER + "/fail-{{{{ ds }}}}")

with DAG("downstream", schedule=None):
    ExternalTaskSensor(
        "upstream_done", external_dag_id="upstream", poke_interval=0.2, timeout=120, retries=2
    )
"""


@pytest.fixture
def env(db_url: str, dags_dir: Path, tmp_path: Path):
    """A scheduler with two worker children on a fresh store of either engine, running the
    DAGs above (their files in ``tmp_path / "files"``); stopped when the test ends."""
    (tmp_path / "files").mkdir()
    write_dag(dags_dir, "sensors.py", SENSORS.format(folder=str(tmp_path / "files")))
    found = {
        "DAGRUN_DB_URL": db_url,
        "DAGRUN_HOME": str(tmp_path / "home"),
        "DAGRUN_DAGS_FOLDER": str(dags_dir),
    }
    Store(db_url).dispose()
    scheduler = start_cli(
        "scheduler", "--workers", "2", "--poll", "0.2", env=found, log=tmp_path / "s.log"
    )
    try:
        yield found
    finally:
        assert stop_process(scheduler) == 0, (tmp_path / "s.log").read_text()


def trigger(env: dict[str, str], dag_id: str, date: str = "2026-01-05") -> None:
    done = run_cli("trigger", dag_id, "--date", date, env=env)
    assert done.returncode == 0, done.stdout + done.stderr


def task_row(env: dict[str, str], dag_id: str, task_id: str, date: str = "2026-01-05"):
    """(state, try number, pokes, first poke, lease owner, last error) of one task instance,
    or None before its run has one."""
    rows = db_rows(
        env,
        "SELECT r.logical_date, t.state, t.try_number, t.pokes, t.first_poke_at, "
        "t.lease_owner, t.last_error FROM task_instance t JOIN dag_run r ON r.id = t.run_pk "
        f"WHERE r.dag_id = '{dag_id}' AND t.task_id = '{task_id}'",
    )
    return next((row[1:] for row in rows if str(row[0])[:10] == date), None)


def attempts(env: dict[str, str], dag_id: str, task_id: str) -> list[tuple[int, str]]:
    """(try number, outcome) of a task's attempts, in order."""
    return db_rows(
        env,
        "SELECT try_number, outcome FROM task_attempt "
        f"WHERE dag_id = '{dag_id}' AND task_id = '{task_id}' ORDER BY id",
    )


def run_state(env: dict[str, str], dag_id: str, date: str = "2026-01-05") -> str | None:
    rows = db_rows(env, f"SELECT logical_date, state FROM dag_run WHERE dag_id = '{dag_id}'")
    return next((state for day, state in rows if str(day)[:10] == date), None)


def waiting(env: dict[str, str], dag_id: str, task_id: str, date: str = "2026-01-05"):
    """The sensor's row once it has poked twice and waits for the next poke."""
    row = task_row(env, dag_id, task_id, date)
    return row if row and row[0] == "up_for_reschedule" and row[2] >= 2 else None


def test_a_file_sensor_waits_holding_nothing_until_the_file_exists(env, tmp_path):
    trigger(env, "landing")
    _, tries, pokes, first, owner, _ = wait_until(
        lambda: waiting(env, "landing", "landed"), 60, interval=0.1, what="two pokes"
    )
    assert (tries, owner) == (0, None), "its try given back, no lease held"
    assert task_row(env, "landing", "load")[0] == "none"
    (tmp_path / "files" / "2026-01-05.csv").write_text("id\n1\n")
    wait_until(lambda: run_state(env, "landing") == "success", 60, what="the run")
    row = task_row(env, "landing", "landed")
    assert (row[0], row[1], row[3]) == ("success", 1, first)
    assert row[2] >= pokes
    history = attempts(env, "landing", "landed")
    assert history == [(1, "rescheduled")] * row[2] + [(1, "success")]


def test_a_sensor_times_out_for_good_from_its_first_poke(env):
    trigger(env, "deadline")
    wait_until(lambda: run_state(env, "deadline") == "failed", 60, what="the timeout")
    state, tries, pokes, _, _, error = task_row(env, "deadline", "never")
    assert (state, tries, error) == ("failed", 1, "sensor timed out after 2 s")
    history = attempts(env, "deadline", "never")
    assert history == [(1, "rescheduled")] * (pokes - 1) + [(1, "timed_out")], "no retry"
    assert pokes >= 2
    listed = run_cli("tasks", "failed", "deadline", env=env)
    assert "sensor timed out after 2 s" in listed.stdout


def test_an_external_task_sensor_follows_the_other_dags_runs(env, tmp_path):
    files = tmp_path / "files"
    (files / "fail-2026-01-06").write_text("")
    for date in ("2026-01-05", "2026-01-06"):
        trigger(env, "downstream", date)
        trigger(env, "upstream", date)
    for date in ("2026-01-05", "2026-01-06"):
        wait_until(
            lambda date=date: waiting(env, "downstream", "upstream_done", date),
            60,
            interval=0.1,
            what=f"the sensor of {date} to wait",
        )
    (files / "go").write_text("")
    wait_until(lambda: run_state(env, "downstream", "2026-01-06") == "failed", 60, what="fail")
    wait_until(lambda: run_state(env, "downstream", "2026-01-05") == "success", 60, what="ok")
    assert run_state(env, "upstream", "2026-01-05") == "success"
    assert run_state(env, "upstream", "2026-01-06") == "failed"
    state, tries, _, _, _, error = task_row(env, "downstream", "upstream_done", "2026-01-06")
    assert (state, tries) == ("failed", 1), "failed at once, its retries unused"
    assert error == "NonRetryableError: DAG 'upstream' at 2026-01-06T00:00:00+00:00 is failed"
    outcomes = [o for _, o in attempts(env, "downstream", "upstream_done")]
    assert outcomes.count("non_retryable") == 1 and outcomes.count("success") == 1
    assert set(outcomes) == {"rescheduled", "non_retryable", "success"}

"""A backfill killed or interrupted midway, then run again with the same command: the range
ends with exactly one successful run per date, none duplicated, none lost."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.exc import OperationalError, ProgrammingError

from dagrun.store.location import normalise_url
from tests.helpers import run_cli, start_cli, stop_process, wait_until, write_dag

pytestmark = pytest.mark.slow

DAYS = [f"2026-01-{day:02d}" for day in range(1, 11)]
BACKFILL = ("backfill", "slow", "--start", DAYS[0], "--end", DAYS[-1], "--workers", "2")

# Two tasks of 0.3 s per date, two dates at a time: the range takes about 3 s.
SLOW = """
import time
from dagrun import DAG, task

with DAG("slow", schedule="@daily", start_date="2026-01-01", max_active_runs=2):

    @task
    def first(ds):
        time.sleep(0.3)
        return ds

    @task
    def second(day):
        time.sleep(0.3)

    second(first())
"""


@pytest.fixture
def env(cli_env: dict[str, str], dags_dir: Path, db_url: str) -> dict[str, str]:
    """The CLI's environment, on SQLite and on PostgreSQL."""
    write_dag(dags_dir, "slow.py", SLOW)
    return {**cli_env, "DAGRUN_DB_URL": db_url, "DAGRUN_LEASE_SECONDS": "2"}


@pytest.fixture
def db(env: dict[str, str]):
    """An engine to look inside the database the CLI uses."""
    engine = create_engine(normalise_url(env["DAGRUN_DB_URL"]))
    yield engine
    engine.dispose()


def sql(db: Engine, query: str) -> list[tuple]:
    """Rows of ``query``; none while the backfill has not made the schema yet."""
    try:
        with db.connect() as conn:
            return [tuple(r) for r in conn.execute(text(query))]
    except ProgrammingError:
        return []
    except OperationalError as exc:
        if "no such table" in str(exc):
            return []
        raise


def succeeded_runs(db: Engine) -> int:
    rows = sql(db, "SELECT count(*) FROM dag_run WHERE state = 'success'")
    return rows[0][0] if rows else 0


def running_tasks(db: Engine) -> int:
    rows = sql(db, "SELECT count(*) FROM task_instance WHERE state = 'running'")
    return rows[0][0] if rows else 0


def midway(db: Engine) -> bool:
    """Some runs done, some not, attempts in flight: the moment to stop the backfill."""
    return 2 <= succeeded_runs(db) <= len(DAYS) - 4 and running_tasks(db) > 0


def start_backfill(env: dict[str, str], db: Engine, tmp_path: Path) -> subprocess.Popen:
    process = start_cli(*BACKFILL, env=env, log=tmp_path / "backfill.log")
    wait_until(lambda: midway(db) or process.poll() is not None, timeout=30, what="midway")
    assert process.poll() is None, (tmp_path / "backfill.log").read_text()
    return process


def finish_and_check(env: dict[str, str], db: Engine) -> None:
    """The same command again completes the range: one successful run per date."""
    again = run_cli(*BACKFILL, env=env, timeout=60)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "resume" in again.stderr
    runs = json.loads(run_cli("runs", "list", "slow", "--json", env=env).stdout)
    assert [r["logical_date"][:10] for r in runs] == DAYS
    assert {r["state"] for r in runs} == {"success"}
    assert sql(db, "SELECT count(*), count(DISTINCT logical_date) FROM dag_run") == [(10, 10)]
    states = sql(db, "SELECT state, count(*) FROM task_instance GROUP BY state")
    assert states == [("success", 2 * len(DAYS))]
    open_attempts = sql(db, "SELECT count(*) FROM task_attempt WHERE outcome IS NULL")
    assert open_attempts == [(0,)]
    succeeded = sql(
        db, "SELECT ti_id, count(*) FROM task_attempt WHERE outcome = 'success' GROUP BY ti_id"
    )
    assert len(succeeded) == 2 * len(DAYS)
    assert {n for _, n in succeeded} == {1}  # no task instance completed twice


def test_sigkilled_backfill_resumes_with_no_duplicate_and_no_lost_run(env, db, tmp_path):
    process = start_backfill(env, db, tmp_path)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(10)
    assert 2 <= succeeded_runs(db) < len(DAYS)
    assert running_tasks(db) > 0  # orphaned leases the next backfill must take back

    finish_and_check(env, db)
    outcomes = {o for (o,) in sql(db, "SELECT DISTINCT outcome FROM task_attempt")}
    assert outcomes <= {"success", "lease_expired"}


def test_ctrl_c_stops_cleanly_and_the_same_command_resumes(env, db, tmp_path):
    process = start_backfill(env, db, tmp_path)
    os.killpg(process.pid, signal.SIGINT)  # what a terminal sends to its foreground group
    try:
        code = process.wait(30)
    finally:
        stop_process(process)
    output = (tmp_path / "backfill.log").read_text()
    assert code != 0, output
    assert "interrupted: run the same command again to resume" in output
    assert "Traceback" not in output
    assert succeeded_runs(db) < len(DAYS)
    assert running_tasks(db) == 0
    outcomes = {o for (o,) in sql(db, "SELECT DISTINCT outcome FROM task_attempt")}
    assert None not in outcomes and outcomes <= {"success", "released"}

    finish_and_check(env, db)

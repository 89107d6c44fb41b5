"""A backfill of a mapped DAG SIGKILLed midway, then run again with the same command: every
index of every date ends success once, and none ran twice without a record of why, on
SQLite and PostgreSQL."""

from __future__ import annotations

import os
import signal
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import func, select

from dagrun.store import Store
from dagrun.store.schema import dag_run, task_attempt, task_instance
from tests.faults.invariants import _EXPLAINED
from tests.helpers import run_cli, start_cli, wait_until, write_dag

pytestmark = pytest.mark.slow

DAYS = [f"2026-01-{day:02d}" for day in range(1, 7)]
WIDTH = 5
BACKFILL = ("backfill", "fanned", "--start", DAYS[0], "--end", DAYS[-1], "--workers", "2")

# Per date: a list of WIDTH elements, one 0.2 s instance per element, each noting its
# effect as "<date>/<element>", then a task summing the results.
FANNED = """
import os, time
from dagrun import DAG, task

with DAG("fanned", schedule="@daily", start_date="2026-01-01", max_active_runs=2):
    @task
    def elements():
        return list(range({width}))

    @task
    def work(x, ds):
        time.sleep(0.2)
        fd = os.open({effects!r}, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        os.write(fd, f"{{ds}}/{{x}}\\n".encode())
        os.close(fd)
        return x

    @task
    def total(values):
        assert values == list(range({width})), values

    total(work.expand(x=elements()))
"""


def count(store: Store, query) -> int:
    with store.read() as conn:
        return conn.execute(query).scalar_one()


def midway(store: Store) -> bool:
    """Some dates done, some mapped instances running: the moment to kill the backfill."""
    done = select(func.count()).select_from(dag_run).where(dag_run.c.state == "success")
    running = select(func.count()).select_from(task_instance)
    running = running.where(task_instance.c.state == "running", task_instance.c.map_index >= 0)
    try:
        return count(store, done) >= 1 and count(store, running) > 0
    except Exception:  # the schema is not there yet
        return False


def test_a_sigkilled_mapped_backfill_resumes_and_runs_no_index_twice(
    cli_env, dags_dir, db_url, tmp_path
):
    effects = tmp_path / "effects"
    write_dag(dags_dir, "fanned.py", FANNED.format(width=WIDTH, effects=str(effects)))
    env = {**cli_env, "DAGRUN_DB_URL": db_url, "DAGRUN_LEASE_SECONDS": "2"}
    store = Store(db_url)
    try:
        process = start_cli(*BACKFILL, env=env, log=tmp_path / "backfill.log")
        wait_until(lambda: midway(store) or process.poll() is not None, 60, what="midway")
        assert process.poll() is None, (tmp_path / "backfill.log").read_text()
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)
        again = run_cli(*BACKFILL, env=env, timeout=120)
        assert again.returncode == 0, again.stdout + again.stderr
        with store.read() as conn:
            runs = conn.execute(select(dag_run.c.state)).scalars().all()
            instances = conn.execute(
                select(task_instance.c.id, task_instance.c.task_id, task_instance.c.map_index)
                .add_columns(task_instance.c.state, dag_run.c.logical_date)
                .join(dag_run, dag_run.c.id == task_instance.c.run_pk)
            ).all()
            attempts = conn.execute(
                select(task_attempt.c.ti_id, task_attempt.c.outcome).order_by(task_attempt.c.id)
            ).all()
    finally:
        store.dispose()
    assert runs == ["success"] * len(DAYS)
    mapped = [r for r in instances if r.task_id == "work"]
    assert sorted(r.map_index for r in mapped) == sorted(list(range(WIDTH)) * len(DAYS))
    assert {r.state for r in instances} == {"success"}
    outcomes: dict[int, list[str | None]] = {}
    for ti_id, outcome in attempts:
        outcomes.setdefault(ti_id, []).append(outcome)
    written = Counter(Path(effects).read_text().split())
    assert set(written) == {f"{day}/{x}" for day in DAYS for x in range(WIDTH)}
    for tries in outcomes.values():
        assert None not in tries and tries.count("success") == 1, tries
        assert tries[-1] == "success", tries
    for r in mapped:
        tries = outcomes[r.id]
        times = written[f"{r.logical_date:%Y-%m-%d}/{r.map_index}"]
        explained = sum(1 for o in tries if o in _EXPLAINED)
        assert 1 <= times <= len(tries), (r, tries, times)
        assert times <= explained + 1, f"index {r.map_index} ran {times}x: {tries}"

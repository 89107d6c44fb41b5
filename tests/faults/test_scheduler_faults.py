"""Schedulers killed mid-tick and running side by side still make exactly one run per date."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select

from dagrun.runtime.dag_sync import sync_dags
from dagrun.store import Store, dag_reads
from dagrun.store.schema import dag_run, task_attempt, task_instance
from tests.helpers import start_cli, stop_process, wait_until, write_dag

pytestmark = pytest.mark.slow


def run_count(store: Store) -> int:
    with store.read() as conn:
        return conn.execute(select(func.count()).select_from(dag_run)).scalar_one()


def runs_by_dag(store: Store) -> dict[str, list[datetime]]:
    with store.read() as conn:
        rows = conn.execute(
            select(dag_run.c.dag_id, dag_run.c.logical_date).order_by(dag_run.c.logical_date)
        )
        found: dict[str, list[datetime]] = {}
        for dag_id, logical_date in rows:
            found.setdefault(dag_id, []).append(logical_date)
        return found


def expected_dates(store: Store, now: datetime) -> dict[str, list[datetime]]:
    with store.read() as conn:
        specs = [row.spec for row in dag_reads.active_dags(conn)]
    return {
        s.dag_id: [i.start for i in s.timetable.due_intervals(None, now, catchup=True)]
        for s in specs
    }


def test_scheduler_killed_mid_creation_resumes_without_gap_or_duplicate(
    sqlite_url, dags_dir, tmp_path
):
    start = (datetime.now(UTC) - timedelta(days=30)).strftime("%Y-%m-%d")
    for n in range(40):
        write_dag(
            dags_dir,
            f"q{n}.py",
            f"""
            from dagrun import DAG, BashTask

            with DAG("q{n}", schedule="*/15 * * * *", start_date="{start}",
                     max_active_runs=1):
                BashTask("noop", command="true")
            """,
        )
    env = {
        "DAGRUN_DB_URL": sqlite_url,
        "DAGRUN_DAGS_FOLDER": str(dags_dir),
        "DAGRUN_HOME": str(tmp_path / "home"),
    }
    store = Store(sqlite_url)
    first = start_cli(
        "scheduler", "--workers", "0", "--poll", "0.5", env=env, log=tmp_path / "s1.log"
    )
    try:
        wait_until(lambda: run_count(store) > 0, 60, interval=0.01, what="the first runs")
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(10)
    finally:
        stop_process(first)
    at_kill = run_count(store)
    expected = expected_dates(store, datetime.now(UTC))
    total = sum(len(v) for v in expected.values())
    assert 0 < at_kill < total, "the kill did not land in the middle of run creation"
    second = start_cli(
        "scheduler", "--workers", "0", "--poll", "0.5", env=env, log=tmp_path / "s2.log"
    )
    try:
        wait_until(lambda: run_count(store) >= total, 120, interval=0.2, what="all runs")
    finally:
        assert stop_process(second) == 0
    found = runs_by_dag(store)
    for dag_id, dates in expected.items():
        assert found[dag_id][: len(dates)] == dates, f"{dag_id}: a gap or a duplicate"
        assert len(set(found[dag_id])) == len(found[dag_id])
    store.dispose()


def test_two_schedulers_on_postgres_share_a_simulated_month(pg_url, dags_dir, tmp_path):
    for n in range(20):
        write_dag(
            dags_dir,
            f"d{n}.py",
            f"""
            from dagrun import DAG, task

            with DAG("d{n}", schedule="@daily", start_date="2026-01-01", max_active_runs=2):
                @task
                def a(): ...

                @task
                def b(): ...

                @task
                def c(): ...

                a() >> [b(), c()]
            """,
        )
    store = Store(pg_url)
    sync_dags(store, str(dags_dir))
    epoch = time.time()
    sim_end = datetime(2026, 2, 1, tzinfo=UTC)
    args = [
        str(dags_dir),
        str(epoch),
        "2026-01-01T00:00:00+00:00",
        sim_end.isoformat(),
        str(timedelta(days=1).total_seconds() / 0.4),
    ]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.faults.sim_scheduler", pg_url, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for _ in range(2)
    ]
    outputs = []
    for p in procs:
        out, _ = p.communicate(timeout=240)
        outputs.append(out.decode())
        assert p.returncode == 0, out.decode()[-2000:]
    found = runs_by_dag(store)
    expected = [datetime(2026, 1, 1, tzinfo=UTC) + timedelta(days=d) for d in range(31)]
    assert set(found) == {f"d{n}" for n in range(20)}
    for dag_id, dates in found.items():
        assert dates == expected, f"{dag_id}: runs {dates}"
    with store.read() as conn:
        tries = conn.execute(
            select(task_instance.c.try_number, func.count()).group_by(task_instance.c.try_number)
        ).all()
        attempts = conn.execute(
            select(task_attempt.c.ti_id, func.count()).group_by(task_attempt.c.ti_id)
        ).all()
        workers = conn.execute(select(func.count(task_attempt.c.worker.distinct()))).scalar()
        states = conn.execute(select(task_instance.c.state).distinct()).scalars().all()
    assert dict(tries) == {1: 20 * 31 * 3}, "a task instance was queued twice"
    assert {n for _, n in attempts} == {1} and len(attempts) == 20 * 31 * 3
    assert states == ["success"]
    assert workers == 2, "both schedulers did part of the work"
    store.dispose()

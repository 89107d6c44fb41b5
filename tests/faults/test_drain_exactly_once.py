"""Several real ``dagrun worker`` processes drain thousands of ready task instances, each
executed exactly once (side effects counted), on PostgreSQL and on SQLite."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

import pytest
from sqlalchemy import func, select

from dagrun.runtime.dag_sync import sync_dags
from dagrun.states import RunType
from dagrun.store import Store, dag_reads, runs
from dagrun.store.schema import task_attempt, task_instance
from tests.helpers import start_cli, stop_process, wait_until, write_dag

pytestmark = pytest.mark.slow

TASKS_PER_RUN = 20


def queue_many(store: Store, dags_dir, effects, run_count: int) -> int:
    """A DAG of independent tasks; ``run_count`` runs created, admitted and started at once."""
    write_dag(
        dags_dir,
        "wide.py",
        f"""
        import os
        from dagrun import DAG, task

        with DAG("wide", schedule="@daily", start_date="2020-01-01", max_active_runs=10000):
            @task
            def effect(ctx):
                fd = os.open({str(effects)!r}, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
                os.write(fd, (ctx.idempotency_key + "\\n").encode())
                os.close(fd)

            for _ in range({TASKS_PER_RUN}):
                effect()
        """,
    )
    sync_dags(store, str(dags_dir))
    with store.write() as conn:
        spec = dag_reads.get_dag(conn, "wide").spec
        now = store.now(conn)
        first = datetime(2020, 1, 1, tzinfo=UTC)
        last = datetime(2020, 1, run_count, tzinfo=UTC) if run_count <= 31 else None
        intervals = list(spec.timetable.intervals(first, last or datetime(2030, 1, 1, tzinfo=UTC)))
        runs.create_runs(conn, spec, intervals[:run_count], RunType.BACKFILL, now)
        runs.admit_runs(conn, spec, 10**6, now)
        runs.start_runs(conn, spec, now)
        return conn.execute(
            select(func.count()).where(task_instance.c.state == "queued")
        ).scalar_one()


def drain(db_url, dags_dir, tmp_path, workers: int, run_count: int) -> None:
    store = Store(db_url)
    effects = tmp_path / "effects.log"
    queued = queue_many(store, dags_dir, effects, run_count)
    assert queued == run_count * TASKS_PER_RUN
    env = {"DAGRUN_DB_URL": db_url, "DAGRUN_HOME": str(tmp_path / "home")}
    procs = [
        start_cli("worker", "-c", "2", "--poll", "0.1", env=env, log=tmp_path / f"w{i}.log")
        for i in range(workers)
    ]
    try:

        def all_done() -> bool:
            with store.read() as conn:
                return (
                    conn.execute(
                        select(func.count()).where(task_instance.c.state != "success")
                    ).scalar_one()
                    == 0
                )

        wait_until(all_done, 240, interval=0.2, what=f"{queued} task instances to succeed")
    finally:
        codes = [stop_process(p) for p in procs]
    assert codes == [0] * workers
    lines = effects.read_text().splitlines()
    counts = Counter(lines)
    assert len(lines) == queued, "some task ran twice or not at all"
    assert len(counts) == queued and set(counts.values()) == {1}
    with store.read() as conn:
        outcomes = Counter(o for (o,) in conn.execute(select(task_attempt.c.outcome)))
        owners = {o for (o,) in conn.execute(select(task_attempt.c.worker).distinct())}
    assert outcomes == {"success": queued}
    assert len({o.split(":")[1] for o in owners}) == workers, "every worker took part"
    store.dispose()


def test_four_workers_on_postgres_run_2000_tasks_exactly_once(pg_url, dags_dir, tmp_path):
    drain(pg_url, dags_dir, tmp_path, workers=4, run_count=100)


def test_two_workers_on_sqlite_run_2000_tasks_exactly_once(sqlite_url, dags_dir, tmp_path):
    drain(sqlite_url, dags_dir, tmp_path, workers=2, run_count=100)

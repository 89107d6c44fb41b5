"""Database outages, made by cutting a TCP proxy between dagrun and PostgreSQL: the
long-running processes ride them out and carry on; past the limit they give up with one
line; a short command fails at once."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from dagrun.store import Store
from tests.faults.invariants import check_effects, leftovers, runs_ended, task_states, token_env
from tests.faults.proxy import CuttableProxy
from tests.helpers import queue_run, run_cli, start_cli, stop_process, wait_until, write_dag

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

OUTAGE_SECONDS = 4
EFFECT_DAG = """
import time
from dagrun import DAG, task

with DAG("{dag_id}", schedule={schedule!r}, start_date="2026-01-01", max_active_runs=8):
    @task
    def work(ctx):
        time.sleep({seconds})
        with open({effects!r}, "a") as handle:
            handle.write(f"{{ctx.run_id}}/{{ctx.task_id}}\\n")

    for _ in range({tasks}):
        work()
"""


@pytest.fixture
def proxy():
    proxied = CuttableProxy()
    yield proxied
    proxied.close()


def fault_env(url: str, tmp_path: Path, dags_dir: Path, **extra: str) -> dict[str, str]:
    return {
        "DAGRUN_DB_URL": url,
        "DAGRUN_HOME": str(tmp_path / "home"),
        "DAGRUN_DAGS_FOLDER": str(dags_dir),
        "DAGRUN_LEASE_SECONDS": "6",
        **token_env(),
        **extra,
    }


def write_effect_dag(dags_dir: Path, effects: Path, tasks: int, seconds: float, **kw) -> None:
    source = EFFECT_DAG.format(
        dag_id=kw.get("dag_id", "outage"),
        schedule=kw.get("schedule"),
        seconds=seconds,
        effects=str(effects),
        tasks=tasks,
    )
    write_dag(dags_dir, f"{kw.get('dag_id', 'outage')}.py", source)


def successes(store: Store) -> int:
    return task_states(store).get("success", 0)


def outage(proxy: CuttableProxy, logs: list[Path]) -> None:
    """Cut the database off until every process has noticed and ``OUTAGE_SECONDS`` have
    passed, then bring it back."""
    cut_at = time.monotonic()
    proxy.cut()
    for log in logs:
        wait_until(
            lambda log=log: "database unavailable" in log.read_text(),
            30,
            what=f"{log.name} to notice the outage",
        )
    time.sleep(max(0.0, OUTAGE_SECONDS - (time.monotonic() - cut_at)))  # the fault's length
    proxy.restore()


def said_once(log: Path) -> None:
    text = log.read_text()
    assert text.count("database unavailable") == 1, text
    assert text.count("database is back") == 1, text


def test_workers_and_scheduler_ride_out_an_outage(pg_url, proxy, dags_dir, tmp_path):
    store = Store(pg_url)
    effects = tmp_path / "effects.log"
    write_effect_dag(dags_dir, effects, tasks=10, seconds=0.4)
    for n in range(2):
        queue_run(store, dags_dir, "outage", run_id=f"before-{n}")
    env = fault_env(proxy.url(pg_url), tmp_path, dags_dir)
    logs = [tmp_path / "worker.log", tmp_path / "scheduler.log"]
    processes = [
        start_cli("worker", "-c", "2", "--poll", "30", env=env, log=logs[0]),
        start_cli("scheduler", "--workers", "1", "--poll", "0.5", env=env, log=logs[1]),
    ]
    try:
        wait_until(lambda: successes(store) >= 3, 60, what="the first tasks")
        outage(proxy, logs)
        wait_until(lambda: successes(store) == 20, 90, what="every task after the outage")
        assert all(p.poll() is None for p in processes), [log.read_text() for log in logs]
        # LISTEN is open again: a run queued now is claimed long before the 30 s poll.
        queue_run(store, dags_dir, "outage", run_id="after")
        started = time.monotonic()
        wait_until(lambda: successes(store) == 30, 25, what="the run queued after")
        assert time.monotonic() - started < 25
        for log in logs:
            wait_until(lambda log=log: "database is back" in log.read_text(), 30, what="back")
            said_once(log)
    finally:
        for process in processes:
            stop_process(process)
    assert runs_ended(store) == {"success": 3}
    written = check_effects(store, effects)
    assert len(written) == 30
    wait_until(lambda: not leftovers(env), 15, what="every process of the test to end")
    store.dispose()


def test_a_backfill_rides_out_an_outage(pg_url, proxy, dags_dir, tmp_path):
    store = Store(pg_url)
    effects = tmp_path / "effects.log"
    write_effect_dag(dags_dir, effects, tasks=4, seconds=0.3, schedule="@daily")
    env = fault_env(proxy.url(pg_url), tmp_path, dags_dir)
    log = tmp_path / "backfill.log"
    backfill = start_cli(
        "backfill", "outage", "--start", "2026-01-01", "--end", "2026-01-06", "--workers", "2",
        env=env, log=log,
    )  # fmt: skip
    try:
        wait_until(lambda: successes(store) >= 3, 60, what="the first tasks")
        outage(proxy, [log])
        assert backfill.wait(120) == 0, log.read_text()
    finally:
        stop_process(backfill)
    said_once(log)
    assert "runs 6 succeeded, 0 failed" in log.read_text()
    assert runs_ended(store) == {"success": 6}
    assert len(check_effects(store, effects)) == 24
    wait_until(lambda: not leftovers(env), 15, what="every process of the test to end")
    store.dispose()


def test_past_the_limit_a_worker_gives_up_with_one_line(pg_url, proxy, dags_dir, tmp_path):
    store = Store(pg_url)
    effects = tmp_path / "effects.log"
    write_effect_dag(dags_dir, effects, tasks=2, seconds=120)
    queue_run(store, dags_dir, "outage")
    env = fault_env(proxy.url(pg_url), tmp_path, dags_dir, DAGRUN_DB_OUTAGE_SECONDS="2")
    log = tmp_path / "worker.log"
    worker = start_cli("worker", "-c", "2", "--poll", "0.2", env=env, log=log)
    try:
        wait_until(lambda: task_states(store).get("running") == 2, 60, what="both claims")
        proxy.cut()
        assert worker.wait(60) == 1, log.read_text()
    finally:
        stop_process(worker)
    last = log.read_text().strip().splitlines()[-1]
    assert last.startswith("error: the database has been unavailable for "), last
    assert "DAGRUN_DB_OUTAGE_SECONDS=2; giving up" in last
    wait_until(lambda: not leftovers(env), 15, what="the worker's children and tasks to end")
    store.dispose()


def test_a_short_command_fails_at_once_with_one_line(pg_url, proxy, dags_dir, tmp_path):
    write_effect_dag(dags_dir, tmp_path / "effects.log", tasks=1, seconds=0)
    env = fault_env(proxy.url(pg_url), tmp_path, dags_dir)
    assert run_cli("dags", "list", env=env).returncode == 0
    proxy.cut()
    started = time.monotonic()
    result = run_cli("runs", "list", "outage", env=env, timeout=60)
    assert result.returncode == 1, result.stdout + result.stderr
    assert time.monotonic() - started < 20
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr


def test_a_worker_started_during_an_outage_waits_for_the_database(
    pg_url, proxy, dags_dir, tmp_path
):
    store = Store(pg_url)
    effects = tmp_path / "effects.log"
    write_effect_dag(dags_dir, effects, tasks=3, seconds=0)
    queue_run(store, dags_dir, "outage")
    env = fault_env(proxy.url(pg_url), tmp_path, dags_dir)
    log = tmp_path / "worker.log"
    proxy.cut()
    worker = start_cli("worker", "-c", "1", "--poll", "0.2", env=env, log=log)
    try:
        wait_until(lambda: "database unavailable" in log.read_text(), 30, what="the wait")
        assert worker.poll() is None, log.read_text()
        proxy.restore()
        wait_until(lambda: successes(store) == 3, 60, what="the tasks once it is back")
    finally:
        stop_process(worker)
    assert log.read_text().count("database is back") == 1
    store.dispose()

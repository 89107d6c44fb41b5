"""Real worker processes killed, paused and stopped: nothing is lost, no stale write counts."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import select

from dagrun.store import Store
from dagrun.store.schema import task_attempt, task_instance
from tests.helpers import queue_run, start_cli, stop_process, wait_until, write_dag

pytestmark = pytest.mark.slow

SLOW_DAG = """
import os, time
from dagrun import DAG, task

with DAG("slow", schedule=None):
    @task
    def work():
        time.sleep({seconds})
        return {{"worker_pid": os.getppid()}}

    work()
"""


def ti_row(store: Store) -> dict:
    with store.read() as conn:
        return dict(conn.execute(select(task_instance)).mappings().one())


def attempt_rows(store: Store) -> list[dict]:
    with store.read() as conn:
        rows = conn.execute(select(task_attempt).order_by(task_attempt.c.id))
        return [dict(r) for r in rows.mappings()]


def worker_env(db_url: str, tmp_path: Path, lease: float) -> dict[str, str]:
    return {
        "DAGRUN_DB_URL": db_url,
        "DAGRUN_HOME": str(tmp_path / "home"),
        "DAGRUN_LEASE_SECONDS": str(lease),
    }


def running_on(store: Store, process) -> dict | None:
    row = ti_row(store)
    owner = row["lease_owner"] or ""
    return row if row["state"] == "running" and f":{process.pid}:" in owner else None


def test_killed_worker_loses_nothing(db_url, dags_dir, tmp_path):
    store = Store(db_url)
    write_dag(dags_dir, "slow.py", SLOW_DAG.format(seconds=3))
    queue_run(store, dags_dir, "slow")
    env = worker_env(db_url, tmp_path, lease=2)
    first = start_cli("worker", "-c", "1", "--poll", "0.2", env=env, log=tmp_path / "a.log")
    try:
        wait_until(lambda: running_on(store, first), 30, what="worker A to claim the task")
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        second = start_cli("worker", "-c", "1", "--poll", "0.2", env=env, log=tmp_path / "b.log")
        try:
            wait_until(lambda: ti_row(store)["state"] == "success", 60, what="task success")
        finally:
            stop_process(second)
        row = ti_row(store)
        assert json.loads(row["return_value"])["worker_pid"] == second.pid
        outcomes = [(a["try_number"], a["outcome"]) for a in attempt_rows(store)]
        assert outcomes == [(1, "lease_expired"), (2, "success")]
        assert row["infra_failures"] == 1 and row["failures"] == 0
    finally:
        stop_process(first)
        store.dispose()


def test_paused_worker_completion_is_rejected_as_stale(db_url, dags_dir, tmp_path):
    store = Store(db_url)
    write_dag(dags_dir, "slow.py", SLOW_DAG.format(seconds=3))
    queue_run(store, dags_dir, "slow")
    env = worker_env(db_url, tmp_path, lease=2)
    paused = start_cli("worker", "-c", "1", "--poll", "0.2", env=env, log=tmp_path / "a.log")
    other = None
    try:
        claimed = wait_until(lambda: running_on(store, paused), 30, what="worker A to claim")
        wait_until(
            lambda: pause_outside_a_transaction(store, paused.pid),
            30,
            what="worker A paused while its task runs",
        )
        other = start_cli("worker", "-c", "1", "--poll", "0.2", env=env, log=tmp_path / "b.log")
        wait_until(lambda: ti_row(store)["state"] == "success", 60, what="worker B to finish")
        os.kill(paused.pid, signal.SIGCONT)

        def stale_recorded() -> bool:
            first = attempt_rows(store)[0]
            return first["fence_token"] == claimed["fence_token"] and first["late_result"]

        wait_until(stale_recorded, 30, what="worker A's late completion to be kept as stale")
        row = ti_row(store)
        assert row["state"] == "success"
        assert json.loads(row["return_value"])["worker_pid"] == other.pid
        attempts = attempt_rows(store)
        # The reaper's expiry is the attempt's one outcome; the late success sits beside it.
        assert [a["outcome"] for a in attempts] == ["lease_expired", "success"]
        assert "finished as success after its lease was lost" in attempts[0]["late_result"]
        assert attempts[1]["fence_token"] == claimed["fence_token"] + 1
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(paused.pid, signal.SIGCONT)
        stop_process(paused)
        if other is not None:
            stop_process(other)
        store.dispose()


def test_sigterm_lets_the_running_attempt_finish(sqlite_url, dags_dir, tmp_path):
    store = Store(sqlite_url)
    write_dag(dags_dir, "slow.py", SLOW_DAG.format(seconds=2))
    queue_run(store, dags_dir, "slow")
    env = worker_env(sqlite_url, tmp_path, lease=30)
    worker = start_cli("worker", "-c", "1", "--poll", "0.2", env=env, log=tmp_path / "w.log")
    try:
        wait_until(lambda: running_on(store, worker), 30, what="the claim")
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0
        assert ti_row(store)["state"] == "success"
        assert [a["outcome"] for a in attempt_rows(store)] == ["success"]
    finally:
        stop_process(worker)
        store.dispose()


def test_sigterm_past_grace_releases_the_task_at_once(sqlite_url, dags_dir, tmp_path):
    store = Store(sqlite_url)
    write_dag(dags_dir, "slow.py", SLOW_DAG.format(seconds=60))
    queue_run(store, dags_dir, "slow")
    env = worker_env(sqlite_url, tmp_path, lease=30)
    worker = start_cli(
        "worker", "-c", "1", "--grace", "0.5", "--poll", "0.2", env=env, log=tmp_path / "w.log"
    )
    try:
        wait_until(lambda: running_on(store, worker), 30, what="the claim")
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0
        row = ti_row(store)
        assert row["state"] == "queued" and row["lease_owner"] is None
        assert [a["outcome"] for a in attempt_rows(store)] == ["released"]
    finally:
        stop_process(worker)
        store.dispose()


def pause_outside_a_transaction(store: Store, pid: int) -> bool:
    """SIGSTOP ``pid``; True if the database still takes writes, else resume it and say False.

    The scenario is a worker paused while its task runs. On SQLite a process paused inside
    its own (millisecond-long) write transaction would hold the single write lock and block
    every writer: a limit of SQLite, not of leases, so the test pauses between transactions.
    """
    os.kill(pid, signal.SIGSTOP)
    if store.dialect != "sqlite":
        return True
    probe = sqlite3.connect(store.engine.url.database, timeout=0.2)
    try:
        probe.execute("BEGIN IMMEDIATE")
        probe.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        os.kill(pid, signal.SIGCONT)
        return False
    finally:
        probe.close()


def test_second_signal_ends_the_grace_period_at_once(sqlite_url, dags_dir, tmp_path):
    store = Store(sqlite_url)
    write_dag(dags_dir, "slow.py", SLOW_DAG.format(seconds=60))
    queue_run(store, dags_dir, "slow")
    env = worker_env(sqlite_url, tmp_path, lease=30)
    worker = start_cli(
        "worker", "-c", "1", "--grace", "120", "--poll", "0.2", env=env, log=tmp_path / "w.log"
    )
    try:
        wait_until(lambda: running_on(store, worker), 30, what="the claim")
        worker.send_signal(signal.SIGINT)
        wait_until(
            lambda: "again to stop at once" in (tmp_path / "w.log").read_text(),
            10,
            what="the first signal to be handled",
        )
        worker.send_signal(signal.SIGINT)
        assert worker.wait(20) == 0, "the second signal did not cut the 120 s grace short"
        assert ti_row(store)["state"] == "queued"
        assert [a["outcome"] for a in attempt_rows(store)] == ["released"]
    finally:
        stop_process(worker)
        store.dispose()

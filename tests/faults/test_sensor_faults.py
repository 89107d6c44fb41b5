"""A worker SIGKILLed in the middle of a sensor's poke: the poke's lease expires, the next
poke runs on another worker, and the sensor's timeout still counts from its first poke."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from sqlalchemy import select

from dagrun.store import Store
from dagrun.store.schema import task_attempt, task_instance
from tests.helpers import process_gone, queue_run, start_cli, stop_process, wait_until, write_dag

pytestmark = pytest.mark.slow

TIMEOUT = 12

# Each poke notes its process and takes 2 s, so a kill lands during one.
SLOW_POKES = """
import os, time
from dagrun import DAG, task

with DAG("sensing", schedule=None):
    @task.sensor(poke_interval=0.2, timeout={timeout})
    def slow_poke():
        with open({pids!r}, "a") as pids:
            pids.write(f"{{os.getpid()}}\\n")
        time.sleep(2)
        return False

    slow_poke()
"""


def sensor(store: Store) -> dict:
    with store.read() as conn:
        return dict(conn.execute(select(task_instance)).mappings().one())


def attempts(store: Store) -> list[dict]:
    with store.read() as conn:
        rows = conn.execute(select(task_attempt).order_by(task_attempt.c.id))
        return [dict(r) for r in rows.mappings()]


def poking_on(store: Store, worker, pids: Path, pokes: int) -> bool:
    """Whether ``worker`` runs the poke after ``pokes`` recorded ones, inside the callable."""
    row = sensor(store)
    started = len(pids.read_text().split()) if pids.exists() else 0
    return (
        row["state"] == "running"
        and f":{worker.pid}:" in (row["lease_owner"] or "")
        and row["pokes"] == pokes
        and started == pokes + 1
    )


def test_a_worker_killed_mid_poke_keeps_the_timeout_of_the_first_poke(db_url, dags_dir, tmp_path):
    store = Store(db_url)
    pids = tmp_path / "pids"
    write_dag(dags_dir, "sensing.py", SLOW_POKES.format(timeout=TIMEOUT, pids=str(pids)))
    queue_run(store, dags_dir, "sensing")
    env = {
        "DAGRUN_DB_URL": db_url,
        "DAGRUN_HOME": str(tmp_path / "home"),
        "DAGRUN_LEASE_SECONDS": "2",
    }
    first = start_cli("worker", "-c", "1", "--poll", "0.2", env=env, log=tmp_path / "a.log")
    second = None
    try:
        wait_until(lambda: poking_on(store, first, pids, 2), 60, what="A's third poke")
        first_poke = sensor(store)["first_poke_at"]
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        child = int(pids.read_text().split()[-1])
        wait_until(lambda: process_gone(child), 10, what="the poke's process to die with A")
        second = start_cli("worker", "-c", "1", "--poll", "0.2", env=env, log=tmp_path / "b.log")
        wait_until(lambda: sensor(store)["state"] == "failed", 60, what="the sensor's timeout")
    finally:
        stop_process(first)
        if second is not None:
            stop_process(second)
    row = sensor(store)
    assert row["last_error"] == f"sensor timed out after {TIMEOUT} s"
    assert row["first_poke_at"] == first_poke, "the kill did not restart the timeout"
    assert (row["infra_failures"], row["failures"]) == (1, 0)
    history = attempts(store)
    outcomes = [(a["try_number"], a["outcome"]) for a in history]
    assert outcomes[:3] == [(1, "rescheduled"), (1, "rescheduled"), (1, "lease_expired")]
    assert outcomes[3:-1] == [(2, "rescheduled")] * (len(outcomes) - 4)
    assert outcomes[-1] == (2, "timed_out")
    assert row["pokes"] == len(outcomes) - 1, "the lost poke is no poke"
    after_kill = history[3]
    assert f":{second.pid}:" in after_kill["worker"]
    ended = history[-1]["ended_at"]
    assert (ended - first_poke).total_seconds() >= TIMEOUT
    assert (ended - after_kill["started_at"]).total_seconds() < TIMEOUT, (
        "the timeout counted from the first poke, not from the first after the kill"
    )
    store.dispose()

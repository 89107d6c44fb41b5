"""A worker killed while a callback runs: the callback ends failed (worker lost) and is never
run again, by any worker, on SQLite and PostgreSQL."""

from __future__ import annotations

import os
import signal

import pytest
from sqlalchemy import select

from dagrun.store import Store
from dagrun.store.callbacks import LOST
from dagrun.store.schema import callback, task_instance
from tests.helpers import queue_run, start_cli, stop_process, wait_until, write_dag

pytestmark = pytest.mark.slow

# A task whose success callback notes that it started, then takes a minute.
SLOW_CALLBACK = """
import os, time
from dagrun import DAG, task

def slow_alert(context):
    fd = os.open({marker!r}, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, b"started\\n")
    os.close(fd)
    time.sleep(60)

with DAG("alerted", schedule=None):
    @task(on_success_callback=slow_alert)
    def work():
        return 1

    work()
"""


def callback_row(store: Store):
    with store.read() as conn:
        return conn.execute(select(callback)).one_or_none()


def test_a_worker_killed_during_a_callback_never_runs_it_twice(db_url, dags_dir, tmp_path):
    marker = tmp_path / "marker"
    write_dag(dags_dir, "alerted.py", SLOW_CALLBACK.format(marker=str(marker)))
    store = Store(db_url)
    queue_run(store, dags_dir, "alerted")
    env = {
        "DAGRUN_DB_URL": db_url,
        "DAGRUN_HOME": str(tmp_path / "home"),
        "DAGRUN_LEASE_SECONDS": "3",
    }
    first = start_cli("worker", "-c", "1", "--poll", "0.1", env=env, log=tmp_path / "w1.log")
    second = None
    try:
        wait_until(marker.exists, 30, what="the callback to start")
        row = callback_row(store)
        assert row.state == "running" and f":{first.pid}:" in row.lease_owner
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(10)
        second = start_cli("worker", "-c", "1", "--poll", "0.1", env=env, log=tmp_path / "w2.log")

        def ended():
            row = callback_row(store)
            return row if row.state != "running" else None

        row = wait_until(ended, 30, what="the lost callback to be ended")
        assert (row.state, row.outcome_error) == ("failed", LOST)
        with store.read() as conn:
            assert conn.execute(select(task_instance.c.state)).scalar_one() == "success"
    finally:
        for process in (first, second):
            if process is not None:
                stop_process(process)
        store.dispose()
    assert marker.read_text() == "started\n", "the callback ran once, never again"

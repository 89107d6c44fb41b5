"""The queue's upkeep loop (dagrun.runtime.upkeep): one per process, whatever roles run in
it. Its sweeps wake the worker beside it, and after an outage it reaps nothing until the
database has answered for a lease; with a scheduler alone (``--workers 0``), retries still
wake."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import select

from dagrun.errors import StoreUnavailable
from dagrun.runtime.upkeep import UpkeepLoop
from dagrun.states import AttemptOutcome
from dagrun.store import attempts, registry
from dagrun.store import upkeep as store_upkeep
from dagrun.store.attempts import Outcome
from dagrun.store.outage import Health
from dagrun.store.schema import task_instance
from tests.helpers import queue_run, start_cli, stop_process, wait_until, write_dag

LEASE = 0.3


class FakeStore:
    """Enough of a store for the loop: its sweeps are the test's (``fake_sweep``)."""

    def __init__(self, health: Health | None = None) -> None:
        self.health = health


@pytest.fixture
def sweeps(monkeypatch):
    """Each sweep's ``reap`` argument; a sweep raises while ``down`` is set, and reports
    work queued while ``queued`` is set."""
    state = {"reaps": [], "down": False, "queued": False}

    def fake_sweep(_store, _specs, _budget, *, reap):
        state["reaps"].append(reap)
        if state["down"]:
            raise StoreUnavailable("database error: connection refused")
        return store_upkeep.SweepReport(requeued=int(state["queued"]))

    monkeypatch.setattr(store_upkeep, "sweep", fake_sweep)
    return state


def test_a_sweep_that_queued_work_tells_the_worker_beside_it(sweeps):
    told = []
    loop = UpkeepLoop(FakeStore(), told.append, after_sweep=told.append)
    assert loop.turn() == loop.interval
    sweeps["queued"] = True
    loop.turn()
    assert told == [False, True]


def test_after_its_own_failed_sweep_it_reaps_nothing_for_a_lease(sweeps):
    loop = UpkeepLoop(FakeStore(), pytest.fail, lease_seconds=LEASE)
    loop.turn()
    sweeps["down"] = True
    with pytest.raises(StoreUnavailable):
        loop.turn()
    sweeps["down"] = False
    time.sleep(LEASE)  # however long the outage lasted, the lease counts from its end
    loop.turn()
    loop.turn()
    time.sleep(LEASE)
    loop.turn()
    assert sweeps["reaps"] == [True, True, False, False, True]


def test_an_outage_another_thread_saw_holds_reaping_too(sweeps):
    """A worker whose sweeps are rare (a long ``--poll``) may sweep nowhere near the outage
    its lease keeper saw: the process's health tells it."""
    health = Health(limit=60)
    loop = UpkeepLoop(FakeStore(health), pytest.fail, lease_seconds=LEASE)
    health.failed(StoreUnavailable("database error: connection refused"))
    loop.turn()
    health.ok()
    loop.turn()
    time.sleep(LEASE)
    loop.turn()
    assert sweeps["reaps"] == [False, False, True]


def test_its_loop_rides_out_an_outage_and_stops_when_asked(sweeps):
    loop = UpkeepLoop(FakeStore(), pytest.fail, interval=0.01, lease_seconds=LEASE)
    sweeps["down"] = True
    with loop:
        wait_until(lambda: len(sweeps["reaps"]) >= 3, 10, interval=0.01, what="retries")
        sweeps["down"] = False
        wait_until(lambda: sweeps["reaps"][-1], 10, interval=0.01, what="reaping again")
    count = len(sweeps["reaps"])
    time.sleep(0.05)
    assert len(sweeps["reaps"]) == count  # stopped
    assert not loop._thread.is_alive()


def test_past_the_outage_limit_it_stops_the_process(sweeps):
    health = Health(limit=0.05)
    failed = threading.Event()
    errors = []

    def fail(error: BaseException) -> None:
        errors.append(error)
        failed.set()

    sweeps["down"] = True
    health.failed(StoreUnavailable("database error: connection refused"))
    with UpkeepLoop(FakeStore(health), fail, interval=0.01):
        assert failed.wait(10)
    assert "DAGRUN_DB_OUTAGE_SECONDS" in str(errors[0])


RETRIED = """
from dagrun import DAG, task

with DAG("retried", schedule=None):
    @task(retries=1, retry_delay=0.01)
    def shaky():
        return 1

    shaky()
"""


def state_of(store) -> str:
    with store.read() as conn:
        return conn.execute(select(task_instance.c.state)).scalar_one()


def test_a_scheduler_without_workers_still_wakes_retries(sqlite_store, dags_dir, tmp_path):
    write_dag(dags_dir, "retried.py", RETRIED)
    queue_run(sqlite_store, dags_dir, "retried")
    with sqlite_store.write() as conn:
        now = sqlite_store.now(conn)
        (claim,) = attempts.claim(conn, "gone-worker", 1, 30, now)
        failed = Outcome.of(claim, AttemptOutcome.FAILED, error="ValueError: blip")
        attempts.complete(conn, "gone-worker", [failed], registry.SpecCache().bound(conn), now)
    assert state_of(sqlite_store) == "up_for_retry"
    env = {
        "DAGRUN_DB_URL": sqlite_store.url,
        "DAGRUN_HOME": str(tmp_path / "home"),
        "DAGRUN_DAGS_FOLDER": str(dags_dir),
    }
    log = tmp_path / "scheduler.log"
    scheduler = start_cli("scheduler", "--workers", "0", "--poll", "0.2", env=env, log=log)
    try:
        wait_until(lambda: state_of(sqlite_store) == "queued", 30, what="the retry to wake")
    finally:
        assert stop_process(scheduler) == 0, log.read_text()

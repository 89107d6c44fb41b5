"""Heartbeats (store.heartbeats): one row per process, the newest of a role, whether a
scheduler is alive, and the page banner's question, on both engines."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import update

from dagrun.errors import StoreUnavailable
from dagrun.states import RunState, RunType
from dagrun.store import heartbeats, runs
from dagrun.store.heartbeats import ALIVE_SECONDS, Pulse, Role
from dagrun.store.schema import dag_run
from tests.store.test_store import T0, days, make_spec, register


def beat(store, owner: str, role: Role = Role.SCHEDULER, at=None, offset=None, host="h1"):
    with store.write() as conn:
        now = at or store.now(conn)
        heartbeats.beat(conn, owner, role, host, 42, T0, now, offset)
    return now


def newest(store, role: Role = Role.SCHEDULER):
    with store.read() as conn:
        return heartbeats.newest(conn, role)


def stall(store):
    with store.read() as conn:
        return heartbeats.scheduler_stall(conn)


def runs_in(store, state: RunState | None) -> None:
    """One run of a registered DAG, left in ``state`` (None: no run at all)."""
    if state is None:
        return
    spec = make_spec()
    register(store, spec)
    with store.write() as conn:
        runs.create_runs(conn, spec, days(1), RunType.SCHEDULED, T0)
        conn.execute(update(dag_run).values(state=state.value))


def test_a_process_keeps_one_row_its_start_and_its_latest_beat(store):
    first = beat(store, "a", offset=0.5)
    later = beat(store, "a", at=first + timedelta(seconds=5), offset=-1.25)
    found = newest(store)
    assert (found.owner, found.role, found.host, found.pid) == ("a", "scheduler", "h1", 42)
    assert found.started_at == T0 and found.beat_at == later and found.clock_offset == -1.25
    with store.read() as conn:
        assert [b.owner for b in heartbeats.live(conn, later)] == ["a"]


def test_newest_is_the_latest_beat_of_the_role_asked_for(store):
    now = beat(store, "old-scheduler")
    beat(store, "new-scheduler", at=now + timedelta(seconds=1))
    beat(store, "worker", Role.WORKER, at=now + timedelta(seconds=2))
    assert newest(store).owner == "new-scheduler"
    assert newest(store, Role.WORKER).owner == "worker"


def test_forget_deletes_that_process_only(store):
    beat(store, "a")
    beat(store, "b")
    with store.write() as conn:
        heartbeats.forget(conn, "a")
    with store.read() as conn:
        assert [b.owner for b in heartbeats.live(conn, store.now(conn))] == ["b"]


def test_prune_deletes_rows_silent_for_a_day(store):
    now = beat(store, "alive")
    beat(store, "dead", at=now - heartbeats.FORGET_AFTER - timedelta(seconds=1))
    beat(store, "quiet", at=now - heartbeats.FORGET_AFTER + timedelta(seconds=1))
    with store.write() as conn:
        assert heartbeats.prune(conn, now) == 1
        assert {b.owner for b in heartbeats.live(conn, now - timedelta(days=2))} == {
            "alive",
            "quiet",
        }


def test_alive_until_the_threshold_and_not_at_it():
    """As Airflow's scheduler_health_check_threshold: the age strictly below it."""
    beat_at = T0
    assert heartbeats.is_alive(beat_at, T0 + timedelta(seconds=ALIVE_SECONDS - 0.001))
    assert not heartbeats.is_alive(beat_at, T0 + timedelta(seconds=ALIVE_SECONDS))
    assert not heartbeats.is_alive(None, T0)


@pytest.mark.parametrize("state", [RunState.WAITING, RunState.QUEUED, RunState.RUNNING])
def test_a_stall_when_no_scheduler_ever_beat_while_a_run_waits(store, state):
    runs_in(store, state)
    assert stall(store) == heartbeats.Stall(None, None)


@pytest.mark.parametrize("state", [None, RunState.SUCCESS, RunState.FAILED])
def test_no_stall_while_no_run_needs_a_scheduler(store, state):
    runs_in(store, state)
    assert stall(store) is None


def test_a_scheduler_silent_past_the_threshold_is_a_stall_by_the_stores_clock(store):
    runs_in(store, RunState.QUEUED)
    with store.read() as conn:
        now = store.now(conn)
    last = beat(store, "s", at=now - timedelta(seconds=ALIVE_SECONDS + 30))
    found = stall(store)
    assert found is not None and found.last == last
    assert ALIVE_SECONDS + 30 <= found.seconds < ALIVE_SECONDS + 60
    beat(store, "s")
    assert stall(store) is None
    beat(store, "w", Role.WORKER)  # a worker alone is no scheduler
    beat(store, "s", at=now - timedelta(seconds=ALIVE_SECONDS + 1))
    assert stall(store) is not None


def test_a_pulse_is_due_every_few_seconds_keeps_its_start_and_prunes(store):
    with store.read() as conn:
        first = store.now(conn)
    beat(store, "dead", at=first - heartbeats.FORGET_AFTER - timedelta(seconds=1))
    pulse = Pulse(Role.WORKER, every=3600)
    assert pulse.owner.startswith(f"{pulse.host}:{pulse.pid}:") and pulse.due()
    with store.write() as conn:
        pulse.beat(conn, first, None)
    assert newest(store) is None  # the dead scheduler's row went with the first beat
    assert not pulse.due() and 3590 < pulse.wait() <= 3600
    with store.write() as conn:
        pulse.beat(conn, first + timedelta(seconds=1), 0.25)
    found = newest(store, Role.WORKER)
    assert found.started_at == first and found.clock_offset == 0.25
    pulse.forget(store)
    assert newest(store, Role.WORKER) is None


def test_a_pulse_stopping_while_the_database_is_away_leaves_its_row(store, monkeypatch):
    pulse = Pulse(Role.SCHEDULER)
    with store.write() as conn:
        pulse.beat(conn, store.now(conn), None)

    def away():
        raise StoreUnavailable("the database is away")

    monkeypatch.setattr(store, "write", away)
    pulse.forget(store)
    assert newest(store).owner == pulse.owner

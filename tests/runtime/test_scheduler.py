"""The scheduler on a fake clock: catchup, max_active_runs, end_date, pause, spread, DST."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select

from dagrun.errors import OutageTooLong
from dagrun.runtime import scheduler
from dagrun.runtime.dag_sync import sync_dags
from dagrun.runtime.scheduler import Scheduler, SchedulerLoop
from dagrun.states import AttemptOutcome, RunState
from dagrun.store import attempts, dag_reads, operator_actions, registry, runs
from dagrun.store.attempts import Outcome
from dagrun.store.schema import dag_run, task_instance
from dagrun.timing.timetable import DataInterval
from tests.helpers import write_dag

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class FakeClock:
    def __init__(self, now: datetime):
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def daily_dag(dags_dir, *, start="2026-01-30", catchup=True, max_active=16, extra=""):
    write_dag(
        dags_dir,
        "daily.py",
        f"""
        from dagrun import DAG, task

        with DAG("daily", schedule="@daily", start_date="{start}", catchup={catchup},
                 max_active_runs={max_active}{extra}):
            @task
            def first():
                return 1

            @task
            def second():
                return 2

            first() >> second()
        """,
    )


def run_states(store) -> list[str]:
    with store.read() as conn:
        rows = conn.execute(select(dag_run.c.state).order_by(dag_run.c.logical_date))
        return [r.state for r in rows]


def logical_dates(store) -> list[datetime]:
    with store.read() as conn:
        rows = conn.execute(select(dag_run.c.logical_date).order_by(dag_run.c.logical_date))
        return [r.logical_date for r in rows]


def active_count(store) -> int:
    with store.read() as conn:
        return conn.execute(
            select(func.count()).where(
                dag_run.c.state.in_([RunState.QUEUED.value, RunState.RUNNING.value])
            )
        ).scalar_one()


def drain_once(store) -> int:
    """Act as a worker: claim every queued task instance and complete it successfully."""
    specs = registry.SpecCache()
    with store.write() as conn:
        now = store.now(conn)
        claims = attempts.claim(conn, "test-worker", 10_000, 30, now)
        outcomes = [
            Outcome(c.ti_id, c.run_pk, c.dag_id, c.task_id, c.fence_token, AttemptOutcome.SUCCESS)
            for c in claims
        ]
        attempts.complete(conn, "test-worker", outcomes, specs.bound(conn), now)
    return len(claims)


def test_catchup_true_creates_every_missed_interval(store, dags_dir):
    daily_dag(dags_dir)
    Scheduler(store, str(dags_dir), clock=FakeClock(NOW)).tick()
    dates = logical_dates(store)
    assert len(dates) == 30
    assert dates[0] == datetime(2026, 1, 30, tzinfo=UTC)
    assert dates[-1] == datetime(2026, 2, 28, tzinfo=UTC)
    assert len(set(dates)) == 30


def test_catchup_false_never_builds_a_backlog_past_max_active_runs(store, dags_dir):
    """A schedule faster than its runs: with catchup=False and one active run allowed, no
    run is created while one is active, and the latest due one once it ends."""
    daily_dag(dags_dir, start="2026-01-01", catchup=False, max_active=1)
    clock = FakeClock(datetime(2026, 1, 10, 1, tzinfo=UTC))
    sched = Scheduler(store, str(dags_dir), clock=clock)
    sched.tick()
    assert run_states(store) == ["running"]
    for day in range(11, 15):
        clock.now = datetime(2026, 1, day, 1, tzinfo=UTC)
        sched.tick()
    assert run_states(store) == ["running"], "no backlog of waiting runs"
    with store.write() as conn:
        [pk] = conn.execute(select(dag_run.c.id)).scalars().all()
        spec = dag_reads.get_dag(conn, "daily").spec
        operator_actions.cancel_run(conn, spec, pk, clock.now)
    sched.tick()
    assert run_states(store) == ["failed", "running"]
    assert logical_dates(store)[-1] == datetime(2026, 1, 13, tzinfo=UTC)


def test_catchup_false_creates_only_the_latest(store, dags_dir):
    daily_dag(dags_dir, catchup=False)
    clock = FakeClock(NOW)
    sched = Scheduler(store, str(dags_dir), clock=clock)
    sched.tick()
    assert logical_dates(store) == [datetime(2026, 2, 28, tzinfo=UTC)]
    clock.now = NOW + timedelta(days=3)
    sched.tick()
    assert logical_dates(store)[-1] == datetime(2026, 3, 3, tzinfo=UTC)
    assert len(logical_dates(store)) == 2


@pytest.mark.parametrize("limit", [1, 3])
def test_max_active_runs_never_exceeded_while_30_runs_drain(store, dags_dir, limit):
    daily_dag(dags_dir, max_active=limit)
    sched = Scheduler(store, str(dags_dir), clock=FakeClock(NOW))
    seen_max = 0
    for _ in range(200):
        sched.tick()
        seen_max = max(seen_max, active_count(store))
        assert active_count(store) <= limit
        drain_once(store)
        seen_max = max(seen_max, active_count(store))
        assert active_count(store) <= limit
        if run_states(store).count(RunState.SUCCESS.value) == 30:
            break
    assert run_states(store) == [RunState.SUCCESS.value] * 30
    assert seen_max == limit


def test_runs_start_oldest_first(store, dags_dir):
    daily_dag(dags_dir, max_active=1)
    Scheduler(store, str(dags_dir), clock=FakeClock(NOW)).tick()
    with store.read() as conn:
        running = conn.execute(
            select(dag_run.c.logical_date).where(dag_run.c.state == RunState.RUNNING.value)
        ).scalar_one()
    assert running == datetime(2026, 1, 30, tzinfo=UTC)


def test_end_date_bounds_logical_dates_inclusively(store, dags_dir):
    daily_dag(dags_dir, extra=', end_date="2026-02-05"')
    Scheduler(store, str(dags_dir), clock=FakeClock(NOW)).tick()
    dates = logical_dates(store)
    assert dates[0] == datetime(2026, 1, 30, tzinfo=UTC)
    assert dates[-1] == datetime(2026, 2, 5, tzinfo=UTC)
    assert len(dates) == 7


def test_pause_holds_and_unpause_resumes(store, dags_dir):
    daily_dag(dags_dir, extra=", is_paused_upon_creation=True")
    clock = FakeClock(NOW)
    sched = Scheduler(store, str(dags_dir), clock=clock)
    sched.tick()
    assert logical_dates(store) == []
    with store.write() as conn:
        registry.set_paused(conn, "daily", False)
    sched.tick()
    assert len(logical_dates(store)) == 30


def test_repeated_ticks_and_a_new_day_make_no_duplicate(store, dags_dir):
    daily_dag(dags_dir)
    clock = FakeClock(NOW)
    sched = Scheduler(store, str(dags_dir), clock=clock)
    sched.tick()
    sched.tick()
    assert len(logical_dates(store)) == 30
    clock.now = NOW + timedelta(days=1)
    sched.tick()
    dates = logical_dates(store)
    assert len(dates) == 31 and len(set(dates)) == 31
    assert dates[-1] == datetime(2026, 3, 1, tzinfo=UTC)


def test_two_schedulers_on_one_store_create_each_run_once(store, dags_dir):
    daily_dag(dags_dir)
    clock = FakeClock(NOW)
    a = Scheduler(store, str(dags_dir), clock=clock)
    b = Scheduler(store, str(dags_dir), clock=clock)
    for _ in range(3):
        a.tick()
        b.tick()
    dates = logical_dates(store)
    assert len(dates) == 30 and len(set(dates)) == 30


def test_spread_delays_start_without_changing_logical_dates(store, dags_dir):
    daily_dag(dags_dir, start="2026-02-28", extra=', spread="10m"')
    clock = FakeClock(datetime(2026, 3, 1, 0, 0, 1, tzinfo=UTC))
    sched = Scheduler(store, str(dags_dir), clock=clock)
    sched.tick()
    with store.read() as conn:
        run = conn.execute(select(dag_run)).mappings().one()
    assert run["logical_date"] == datetime(2026, 2, 28, tzinfo=UTC)
    offset = run["not_before"] - datetime(2026, 3, 1, tzinfo=UTC)
    assert timedelta(0) <= offset < timedelta(minutes=10)
    if offset > timedelta(seconds=1):  # a run not due yet waits, taking no slot
        assert run["state"] == RunState.WAITING.value
    clock.now = datetime(2026, 3, 1, 0, 10, tzinfo=UTC)
    sched.tick()
    assert run_states(store) == [RunState.RUNNING.value]


def test_hourly_new_york_fall_back_day_has_25_runs(store, dags_dir):
    write_dag(
        dags_dir,
        "hourly.py",
        """
        from dagrun import DAG, BashTask

        with DAG("hourly", schedule="0 * * * *", start_date="2025-11-02",
                 timezone="America/New_York", end_date="2025-11-02 23:59"):
            BashTask("noop", command="true")
        """,
    )
    Scheduler(store, str(dags_dir), clock=FakeClock(NOW)).tick()
    dates = logical_dates(store)
    assert len(dates) == 25 and len(set(dates)) == 25
    assert dates[0] == datetime(2025, 11, 2, 4, tzinfo=UTC)
    assert dates[-1] == datetime(2025, 11, 3, 4, tzinfo=UTC)


def run_rows(store) -> list[tuple]:
    with store.read() as conn:
        rows = conn.execute(
            select(
                dag_run.c.run_type, dag_run.c.logical_date, dag_run.c.data_interval_end
            ).order_by(dag_run.c.logical_date)
        )
        return [tuple(r) for r in rows]


def test_a_trigger_schedule_makes_a_run_at_each_fire_dated_by_it(store, dags_dir):
    """CronTrigger: each run is due at its fire time, which is its logical date (interval
    0); catchup fills every fire since start_date, in the schedule's own zone."""
    write_dag(
        dags_dir,
        "trigger.py",
        """
        from dagrun import DAG, BashTask, CronTrigger

        with DAG("trigger", schedule=CronTrigger("30 6 * * *", timezone="Asia/Dhaka"),
                 start_date="2026-02-26"):
            BashTask("noop", command="true")
        """,
    )
    Scheduler(store, str(dags_dir), clock=FakeClock(NOW)).tick()
    # 06:30 in Dhaka is 00:30 UTC: the 26th to the 1st of March (NOW is 12:00 on the 1st)
    fires = [datetime(2026, 2, day, 0, 30, tzinfo=UTC) for day in (26, 27, 28)]
    fires.append(datetime(2026, 3, 1, 0, 30, tzinfo=UTC))
    assert run_rows(store) == [("scheduled", fire, fire) for fire in fires]


def test_a_trigger_schedule_without_start_date_begins_once_where_run_immediately_says(
    store, dags_dir
):
    write_dag(
        dags_dir,
        "hourly.py",
        """
        from dagrun import DAG, BashTask, CronTrigger

        with DAG("hourly", schedule=CronTrigger("0 * * * *", run_immediately=True)):
            BashTask("noop", command="true")
        """,
    )
    clock = FakeClock(NOW + timedelta(minutes=30))
    sched = Scheduler(store, str(dags_dir), clock=clock)
    sched.tick()
    assert logical_dates(store) == [NOW], "the latest fire already past runs at once"
    clock.now = NOW + timedelta(hours=2, minutes=10)
    sched.tick()
    hours = [NOW + timedelta(hours=h) for h in range(3)]
    assert logical_dates(store) == hours, "the first run was decided once: no gap after it"


def test_asset_or_time_schedule_makes_time_runs_and_asset_runs(store, dags_dir):
    """AssetOrTimeSchedule: the timetable's runs (scheduled) and, beside them, a run when
    the condition holds over new events (asset), which a task's outlets record."""
    write_dag(
        dags_dir,
        "both.py",
        """
        from dagrun import DAG, Asset, AssetOrTimeSchedule, CronTrigger, task

        with DAG("producer", schedule=None):
            @task(outlets=[Asset("a")])
            def produce():
                return 1

            produce()

        with DAG("both", start_date="2026-03-01",
                 schedule=AssetOrTimeSchedule(timetable=CronTrigger("0 6 * * *"),
                                              assets=Asset("a") | Asset("b"))):
            @task
            def consume():
                return 2

            consume()
        """,
    )
    clock = FakeClock(NOW)
    sched = Scheduler(store, str(dags_dir), clock=clock)
    sched.tick()
    six = datetime(2026, 3, 1, 6, tzinfo=UTC)
    assert run_rows(store) == [("scheduled", six, six)]
    with store.write() as conn:
        spec = dag_reads.get_dag(conn, "producer").spec
        runs.create_manual_run(
            conn, spec, DataInterval(six, six), "by-hand", store.now(conn), start_at=None
        )
    sched.tick()  # starts the producer's run
    while drain_once(store):
        sched.tick()
    with store.read() as conn:
        made = (
            conn.execute(select(dag_run.c.run_type).where(dag_run.c.dag_id == "both"))
            .scalars()
            .all()
        )
    assert sorted(made) == ["asset", "scheduled"]


def test_task_instances_queued_by_trigger_rules_after_upstream_success(store, dags_dir):
    daily_dag(dags_dir, start="2026-02-28")
    Scheduler(store, str(dags_dir), clock=FakeClock(NOW)).tick()
    with store.read() as conn:
        states = dict(conn.execute(select(task_instance.c.task_id, task_instance.c.state)).all())
    assert states == {"first": "queued", "second": "none"}
    drain_once(store)
    with store.read() as conn:
        states = dict(conn.execute(select(task_instance.c.task_id, task_instance.c.state)).all())
    assert states == {"first": "success", "second": "queued"}


def test_depends_on_past_task_starts_when_the_previous_date_succeeds(store, dags_dir):
    write_dag(
        dags_dir,
        "past.py",
        """
        from dagrun import DAG, task

        with DAG("past", schedule="@daily", start_date="2026-02-26", max_active_runs=3):
            @task(depends_on_past=True)
            def load():
                return 1

            load()
        """,
    )
    sched = Scheduler(store, str(dags_dir), clock=FakeClock(NOW))
    sched.tick()
    with store.read() as conn:
        queued = (
            conn.execute(
                select(dag_run.c.logical_date)
                .join(task_instance, task_instance.c.run_pk == dag_run.c.id)
                .where(task_instance.c.state == "queued")
            )
            .scalars()
            .all()
        )
    assert queued == [datetime(2026, 2, 26, tzinfo=UTC)], "later dates wait for their past"
    for _ in range(3):
        sched.tick()
        assert drain_once(store) == 1, "each completion readies exactly the next date"
    assert run_states(store) == [RunState.SUCCESS.value] * 3


def test_a_herd_of_due_runs_starts_in_batches_that_commit_one_by_one(store, dags_dir, monkeypatch):
    """30 runs due at once with room for all: one tick starts every one of them, but a
    batch at a time, each its own transaction, so workers see the first runs' tasks while
    the rest are being admitted."""
    monkeypatch.setattr(scheduler, "ADMIT_PER_COMMIT", 7)
    daily_dag(dags_dir, max_active=100)
    sched = Scheduler(store, str(dags_dir), clock=FakeClock(NOW))
    commits = []
    write = store.write

    def counted():
        commits.append(active_count(store))
        return write()

    monkeypatch.setattr(store, "write", counted)
    report = sched.tick()
    assert report.started == {"daily": 30}
    assert run_states(store) == [RunState.RUNNING.value] * 30
    assert [n for n in commits if 0 < n < 30] == [7, 14, 21, 28]  # active as each batch began


def test_a_foreground_loop_told_of_a_fatal_error_stops_and_raises_it(sqlite_store):
    """``dagrun scheduler --workers 0``: its upkeep loop, on another thread, hands an error
    it cannot ride out to the scheduler's loop, which ends the process with it."""
    loop = SchedulerLoop(Scheduler(sqlite_store, None), 0.01)
    error = OutageTooLong(301, 300, "connection refused")
    threading.Timer(0.1, loop.fail, [error]).start()
    with pytest.raises(OutageTooLong) as raised:
        loop.run()
    assert raised.value is error


def test_an_embedded_loop_hands_a_fatal_error_to_the_worker(sqlite_store):
    told = []
    loop = SchedulerLoop(Scheduler(sqlite_store, None), 0.01, on_fatal=told.append)
    error = OutageTooLong(301, 300, "connection refused")
    threading.Timer(0.1, loop.fail, [error]).start()
    loop.run()
    assert told == [error]


def test_a_scheduler_says_an_import_error_another_command_recorded_first(store, dags_dir, caplog):
    """``dagrun trigger`` may parse a broken file before the scheduler starts: the scheduler
    still says the error once, on its first parse, and not again while the file stays."""
    write_dag(dags_dir, "broken.py", 'raise RuntimeError("the warehouse module moved")\n')
    sync_dags(store, str(dags_dir))
    sched = Scheduler(store, str(dags_dir), clock=FakeClock(NOW), parse_interval=0)
    with caplog.at_level("WARNING", logger=scheduler.log.name):
        sched.tick()
        sched.tick()
    said = [r.getMessage() for r in caplog.records if "failed to import" in r.getMessage()]
    assert len(said) == 1 and "the warehouse module moved" in said[0]

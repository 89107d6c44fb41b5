"""Retention (``dagrun.store.retention``) on SQLite and PostgreSQL: what ``db clean`` deletes,
what it keeps whatever its age, in batches, with the log segments no row points into."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import func, insert, select, update

from dagrun.states import CallbackState, RunState, TaskState
from dagrun.store import Store, retention, sql
from dagrun.store.audit import entries
from dagrun.store.schema import (
    asset_event,
    audit_log,
    callback,
    dag,
    dag_run,
    partition_write,
    task_attempt,
    task_instance,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CUTOFF = T0 + timedelta(days=5)
HOUR_AGO = time.time() - 3600


def day(n: int) -> datetime:
    return T0 + timedelta(days=n)


class History:
    """Rows made straight into the store: DAGs, runs with task instances, attempts (their
    logs in segment files under ``logs``), callbacks and partition writes."""

    def __init__(self, store: Store, logs: Path):
        self.store = store
        self.logs = logs
        self.dags: set[str] = set()

    def segment(self, name: str, text: str = "hello\n", folder: str = "2020-01-01") -> str:
        path = self.logs / folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as handle:
            handle.write(text)
        os.utime(path, (HOUR_AGO, HOUR_AGO))
        return str(path)

    def run(
        self,
        when: datetime,
        state: RunState = RunState.SUCCESS,
        *,
        dag_id: str = "d",
        tasks: int = 2,
        task_state: TaskState = TaskState.SUCCESS,
        log: str | None = None,
        callback_state: CallbackState = CallbackState.SENT,
    ) -> int:
        """One run with ``tasks`` task instances, an attempt each logging into ``log``, a
        callback per task and one for the run, and a partition write per task."""
        with self.store.write() as conn:
            now = self.store.now(conn)
            if dag_id not in self.dags:
                conn.execute(
                    insert(dag).values(
                        dag_id=dag_id,
                        fileloc=f"/{dag_id}.py",
                        timezone="UTC",
                        spec="{}",
                        spec_hash="x",
                        created_at=now,
                        updated_at=now,
                    )
                )
                self.dags.add(dag_id)
            run_pk = conn.execute(
                insert(dag_run).values(
                    dag_id=dag_id,
                    run_id=f"r{when.isoformat()}",
                    logical_date=when,
                    data_interval_start=when,
                    data_interval_end=when + timedelta(days=1),
                    run_type="scheduled",
                    state=state.value,
                    created_at=now,
                )
            ).inserted_primary_key[0]
            offset = 0
            for i in range(tasks):
                ti_id = conn.execute(
                    insert(task_instance).values(
                        run_pk=run_pk,
                        dag_id=dag_id,
                        task_id=f"t{i}",
                        state=task_state.value,
                        try_number=1,
                        fence_token=1,
                    )
                ).inserted_primary_key[0]
                conn.execute(
                    insert(task_attempt).values(
                        ti_id=ti_id,
                        run_pk=run_pk,
                        dag_id=dag_id,
                        task_id=f"t{i}",
                        try_number=1,
                        fence_token=1,
                        worker="w",
                        started_at=now,
                        outcome="success",
                        log_path=log,
                        log_offset=offset,
                        log_length=6,
                    )
                )
                offset += 6
                conn.execute(
                    insert(callback).values(
                        event="task_success",
                        dag_id=dag_id,
                        run_pk=run_pk,
                        ti_id=ti_id,
                        task_id=f"t{i}",
                        fence_token=1,
                        state=CallbackState.SENT.value,
                        created_at=now,
                        log_path=log,
                    )
                )
                conn.execute(
                    insert(partition_write).values(
                        dataset="sales",
                        partition_key=when.date().isoformat(),
                        path="/data/x",
                        rows=1,
                        sha256="s",
                        unchanged=False,
                        ti_id=ti_id,
                        run_pk=run_pk,
                        written_at=now,
                    )
                )
            conn.execute(
                insert(callback).values(
                    event="run_success",
                    dag_id=dag_id,
                    run_pk=run_pk,
                    state=callback_state.value,
                    created_at=now,
                )
            )
        return run_pk

    def audit(self, at: datetime, action: str = "pause") -> None:
        with self.store.write() as conn:
            conn.execute(insert(audit_log).values(at=at, action=action, dag_id="d"))

    def event(self, asset: str, key: str, at: datetime) -> int:
        with self.store.write() as conn:
            return conn.execute(
                insert(asset_event).values(
                    asset=asset, partition_key=key, fingerprint="f", created_at=at
                )
            ).inserted_primary_key[0]


@pytest.fixture
def history(store: Store, tmp_path: Path) -> History:
    return History(store, tmp_path / "logs")


def count(store: Store, table, *where) -> int:
    with store.read() as conn:
        return conn.execute(select(func.count()).select_from(table).where(*where)).scalar_one()


def run_ids(store: Store) -> set[int]:
    with store.read() as conn:
        return set(conn.execute(select(dag_run.c.id)).scalars())


def rows_of(store: Store, run_pks: set[int]) -> dict[str, int]:
    """Rows that belong to these runs, per table."""
    return {
        table.name: count(store, table, table.c.run_pk.in_(run_pks))
        for table in (task_instance, task_attempt, callback, partition_write)
    }


# ---------------------------------------------------------------- what goes and what stays


def test_finished_runs_before_the_cutoff_go_with_every_row_of_theirs(store, history):
    old = {history.run(day(i), RunState.SUCCESS if i % 2 else RunState.FAILED) for i in range(5)}
    new = {history.run(day(i)) for i in range(5, 8)}
    done = retention.clean(store, CUTOFF)
    assert run_ids(store) == new
    assert rows_of(store, old) == dict.fromkeys(rows_of(store, old), 0)
    assert rows_of(store, new) == {
        "task_instance": 6,
        "task_attempt": 6,
        "callback": 9,
        "partition_write": 6,
    }
    assert (done.runs, done.task_instances, done.attempts) == (5, 10, 10)
    assert (done.callbacks, done.partition_writes) == (15, 10)


def test_unfinished_and_busy_runs_stay_however_old(store, history):
    kept = {
        history.run(day(0), RunState.RUNNING, task_state=TaskState.RUNNING),
        history.run(day(1), RunState.QUEUED, task_state=TaskState.QUEUED),
        history.run(day(2), RunState.WAITING, task_state=TaskState.NONE),
        # finished, but a worker still holds or will run something of it
        history.run(day(3), RunState.FAILED, task_state=TaskState.UP_FOR_RETRY),
        history.run(day(4), RunState.SUCCESS, callback_state=CallbackState.PENDING),
        history.run(day(4) + timedelta(hours=1), callback_state=CallbackState.RUNNING),
    }
    gone = history.run(day(1) + timedelta(hours=1))
    done = retention.clean(store, CUTOFF)
    assert run_ids(store) == kept
    assert done.runs == 1 and gone not in run_ids(store)
    assert all(count(store, task_instance, task_instance.c.run_pk == pk) == 2 for pk in kept)


def test_the_cutoff_is_exclusive_and_every_dag_is_cleaned(store, history):
    history.run(CUTOFF - timedelta(microseconds=1), dag_id="a")
    at_cutoff = history.run(CUTOFF, dag_id="a")
    history.run(day(0), dag_id="b")
    later = history.run(day(9), dag_id="b")
    assert retention.clean(store, CUTOFF).runs == 2
    assert run_ids(store) == {at_cutoff, later}


def test_a_cutoff_without_an_offset_is_each_dags_local_midnight(store, history):
    """``db clean --before 2026-01-06``: a Tokyo DAG's run of 2026-01-06 00:00 Tokyo (before
    midnight UTC) stays, as ``runs list`` shows it on the 6th; audit rows count in UTC."""
    tokyo = ZoneInfo("Asia/Tokyo")
    local = [datetime(2026, 1, d, tzinfo=tokyo).astimezone(UTC) for d in (4, 5, 6)]
    runs_ = [history.run(when, dag_id="tokyo") for when in local]
    utc_day_5 = history.run(day(4), dag_id="d")
    with store.write() as conn:
        conn.execute(update(dag).where(dag.c.dag_id == "tokyo").values(timezone="Asia/Tokyo"))
    history.audit(datetime(2026, 1, 5, 23, tzinfo=UTC))
    planned = retention.plan(store, datetime(2026, 1, 6))
    done = retention.clean(store, datetime(2026, 1, 6))
    assert run_ids(store) == {runs_[2]}
    assert utc_day_5 not in run_ids(store)
    assert planned.runs == done.runs == 3 and done.audit_rows == 1


def test_a_dry_run_counts_what_a_clean_deletes_and_deletes_nothing(store, history):
    old_log = history.segment("old.log", "x" * 100)
    shared = history.segment("shared.log")
    for i in range(4):
        history.run(day(i), log=old_log)
    history.run(day(4), log=shared)
    history.run(day(6), log=shared)
    history.audit(day(1))
    history.audit(day(7))
    before = {t.name: count(store, t) for t in (dag_run, task_instance, audit_log)}
    planned = retention.plan(store, CUTOFF, batch=2)
    assert {t.name: count(store, t) for t in (dag_run, task_instance, audit_log)} == before
    assert Path(old_log).exists()
    done = retention.clean(store, CUTOFF, batch=2)
    assert planned == done
    assert (done.runs, done.audit_rows, done.log_files, done.log_bytes) == (5, 1, 1, 100)
    assert done.shared_segments == 1


def test_batches_take_every_run_and_report_progress(store, history):
    for i in range(23):
        history.run(day(0) + timedelta(hours=i), dag_id="a" if i % 3 else "b", tasks=1)
    history.run(day(7))
    seen: list[int] = []
    done = retention.clean(store, CUTOFF, batch=5, progress=lambda t: seen.append(t.runs))
    assert done.runs == 23 and count(store, dag_run) == 1
    assert seen == [5, 10, 15, 20, 23]


def test_a_batch_finds_its_rows_through_indexes(sqlite_store: Store, tmp_path):
    """Every statement a batch runs (SQLite's plan) searches an index: no table scan, so a
    batch costs the same on years of history as on days."""
    history = History(sqlite_store, tmp_path / "logs")
    for i in range(6):
        history.run(day(i))
    seen: list[tuple[str, tuple]] = []

    def record(statement, parameters, _seconds) -> None:
        if not statement.startswith("BEGIN"):  # a transaction's start searches nothing
            seen.append((statement, tuple(parameters)))

    batches = retention._batches(sqlite_store, CUTOFF, 3)
    first = next(batches)
    with sql.observed(record):
        retention._delete_runs(sqlite_store, first)  # lock, note logs, delete
        assert len(next(batches)) == 2  # the next batch's read (5 runs before the cutoff)
    assert len(seen) == 9
    with sqlite_store.engine.connect() as conn:
        for statement, parameters in seen:
            plan = [
                row[-1]
                for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters)
            ]
            scans = [step for step in plan if step.startswith("SCAN")]
            assert not scans, (statement, plan)


# ---------------------------------------------------------------- logs, audit, assets


def test_log_segments_go_only_when_nothing_points_into_them(store, history, tmp_path):
    gone = history.segment("gone.log", "a" * 10)
    shared = history.segment("shared.log", "b" * 20)
    recent = history.segment("recent.log", "c" * 30)
    os.utime(recent, None)  # written just now: its writer may still record a range in it
    history.run(day(0), log=gone)
    history.run(day(1), log=shared)
    history.run(day(2), log=recent)
    history.run(day(3), log=str(tmp_path / "elsewhere" / "x.log"))
    history.run(day(6), log=shared)
    done = retention.clean(store, CUTOFF)
    assert not Path(gone).exists() and Path(shared).exists() and Path(recent).exists()
    assert (done.log_files, done.log_bytes) == (1, 10)
    assert (done.shared_segments, done.open_segments, done.absent_files) == (1, 1, 1)


def test_a_segment_its_writer_may_still_append_to_stays(store, history):
    """Named <host>-<pid>-<n>.log: kept while that process lives on this host and has opened
    no newer segment; removed once it is gone or has moved on."""
    host = socket.gethostname()
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        live = history.segment(f"{host}-{writer.pid}-1.log")
        dead = history.segment(f"{host}-{ended.pid}-1.log")
        moved_on = history.segment(f"{host}-{os.getpid()}-7.log", folder="2020-01-02")
        history.segment(f"{host}-{os.getpid()}-8.log", folder="2020-01-03")  # its current one
        for i, log in enumerate([live, dead, moved_on]):
            history.run(day(i), log=log)
        done = retention.clean(store, CUTOFF)
    finally:
        writer.kill()
        writer.wait()
    assert Path(live).exists() and not Path(dead).exists() and not Path(moved_on).exists()
    assert (done.log_files, done.open_segments) == (2, 1)
    assert not Path(moved_on).parent.exists()  # the emptied day folder went too
    assert Path(live).parent.exists()


def test_old_audit_rows_go_and_the_clean_is_audited(store, history):
    history.audit(day(0))
    history.audit(day(4))
    history.audit(day(6))
    history.run(day(1))
    retention.clean(store, CUTOFF)
    with store.read() as conn:
        found = entries(conn)
    assert [e.action for e in found] == ["db_clean", "pause"]
    assert found[0].detail["runs"] == 1 and found[0].detail["audit_rows"] == 2
    assert found[0].detail["before"] == CUTOFF.isoformat()


def test_only_superseded_asset_events_go_and_the_latest_of_a_key_stays(store, history):
    first = history.event("sales", "2026-01-01", day(0))
    latest = history.event("sales", "2026-01-01", day(1))
    only = history.event("sales", "2026-01-02", day(1))
    recent_superseded = history.event("costs", "2026-01-01", day(6))
    history.event("costs", "2026-01-01", day(7))
    done = retention.clean(store, CUTOFF)
    with store.read() as conn:
        kept = set(conn.execute(select(asset_event.c.id)).scalars())
    assert done.asset_events == 1 and first not in kept
    assert {latest, only, recent_superseded} <= kept

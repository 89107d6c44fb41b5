"""``dagrun db clean`` as a user runs it: after a backfill on a fresh SQLite home, and while
a scheduler with its workers keeps making and running runs (SQLite and PostgreSQL)."""

from __future__ import annotations

import os
import re
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from dagrun.runtime.dag_sync import sync_dags
from dagrun.states import RunState
from dagrun.store import Store, dag_reads, run_reads, runs
from dagrun.timing.timetable import DataInterval
from tests.helpers import (
    cli_json,
    db_rows,
    run_cli,
    start_cli,
    stop_process,
    wait_until,
    write_dag,
)
from tests.store.test_retention import History

DAILY = """
from dagrun import DAG, task

with DAG("daily", schedule="@daily", start_date="2026-01-01", catchup=False):

    @task
    def extract(ds):
        print(f"extracting {ds}")

    @task
    def load(ds):
        print(f"loading {ds}")

    extract() >> load()
"""


def backfill(env: dict[str, str], start: str, end: str) -> None:
    result = run_cli("backfill", "daily", "--start", start, "--end", end, env=env)
    assert result.returncode == 0, result.stdout + result.stderr


def log_files(env: dict[str, str]) -> dict[Path, int]:
    return {p: p.stat().st_size for p in Path(env["DAGRUN_HOME"], "logs").rglob("*.log")}


#: How ``db clean`` shows a --before without an offset.
LOCAL = "in each DAG's timezone (UTC for audit rows, asset events)"


@pytest.mark.slow
def test_clean_after_a_backfill_keeps_only_the_newer_days(cli_env, dags_dir):
    write_dag(dags_dir, "daily.py", DAILY)
    backfill(cli_env, "2026-01-01", "2026-01-05")
    first_logs = log_files(cli_env)
    backfill(cli_env, "2026-01-06", "2026-01-10")
    an_hour_ago = time.time() - 3600  # the backfills' segments are no longer being written
    for path in log_files(cli_env):
        os.utime(path, (an_hour_ago, an_hour_ago))

    result = run_cli("db", "clean", "--before", "2026-01-06", env=cli_env, input="")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: db clean deletes history: pass --yes to confirm (or --dry-run)"
    ]
    result = run_cli("db", "clean", "--before", "last week", "--yes", env=cli_env)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "invalid --before 'last week'" in result.stderr

    dry = run_cli("db", "clean", "--before", "2026-01-06", "--dry-run", env=cli_env)
    assert dry.returncode == 0, dry.stderr
    assert f"would delete, before 2026-01-06 00:00 {LOCAL}: 5 runs, 10 task instances" in dry.stdout
    assert len(cli_json("runs", "list", "daily", env=cli_env)) == 10

    result = run_cli("db", "clean", "--before", "2026-01-06", "--yes", env=cli_env)
    assert result.returncode == 0, result.stderr
    assert "cleaned 5 of 5 runs…" in result.stderr
    assert f"deleted, before 2026-01-06 00:00 {LOCAL}: 5 runs, 10 task instances, 10 attempts" in (
        result.stdout
    )
    freed = re.search(r"freed (\d+) log files \(([\d,.]+ \w+)\)", result.stdout)
    assert freed and int(freed[1]) == len(first_logs) > 0, result.stdout
    assert not any(path.exists() for path in first_logs)

    listed = cli_json("runs", "list", "daily", env=cli_env)
    assert [r["logical_date"][:10] for r in listed] == [f"2026-01-{d:02}" for d in range(6, 11)]
    gone = run_cli("logs", "daily", "extract", "2026-01-03", env=cli_env)
    assert gone.returncode == 2
    assert gone.stderr.startswith("error: ") and "2026-01-03" in gone.stderr
    assert "no run" in gone.stderr.lower() or "not found" in gone.stderr.lower(), gone.stderr
    kept = run_cli("logs", "daily", "extract", "2026-01-08", env=cli_env)
    assert kept.returncode == 0 and "extracting 2026-01-08" in kept.stdout

    actions = [e["action"] for e in cli_json("audit", env=cli_env)]
    assert actions[0] == "db_clean"
    again = run_cli("db", "clean", "--before", "2026-01-06", "--yes", env=cli_env)
    assert again.returncode == 0 and "deleted, before" in again.stdout and " 0 runs" in again.stdout


# ---------------------------------------------------------------- while a scheduler runs

LIVE = """
import os, time
from dagrun import DAG, task

with DAG("live", schedule=None, max_active_runs=8):

    @task
    def first():
        print("first")

    @task
    def second():
        print("second")

    first() >> second()

with DAG("blocker", schedule=None):

    @task
    def wait_for_file():
        deadline = time.monotonic() + 120
        while not os.path.exists({gate!r}) and time.monotonic() < deadline:
            time.sleep(0.05)
        print("gate open")

    wait_for_file()
"""
CUTOFF = "2026-01-01"
HISTORY_RUNS = 1000


def states(store: Store, dag_id: str) -> dict[str, tuple[str, datetime]]:
    with store.read() as conn:
        return {r.run_id: (r.state, r.logical_date) for r in run_reads.runs(conn, dag_id)}


def blocker_states(store: Store) -> list[str]:
    """The states of the blocker DAG's runs (there is one, at an old logical date)."""
    return [state for state, _ in states(store, "blocker").values()]


class Trigger(threading.Thread):
    """Makes a manual run of ``live`` (logical date now) every few milliseconds until
    stopped, as users and sensors would while the clean goes on."""

    def __init__(self, store: Store) -> None:
        super().__init__(daemon=True)
        self.store = store
        self.made: list[str] = []
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with self.store.read() as conn:
                spec = dag_reads.get_dag(conn, "live").spec
            while not self.stop.wait(0.1):
                key = f"during-{len(self.made)}"
                with self.store.write() as conn:
                    now = self.store.now(conn)
                    runs.create_manual_run(conn, spec, DataInterval(now, now), key, now)
                self.made.append(key)
        except BaseException as exc:  # reported by the test
            self.error = exc


@pytest.mark.slow
def test_clean_while_a_scheduler_makes_and_runs_runs(db_url, dags_dir, tmp_path):
    gate = tmp_path / "gate"
    write_dag(dags_dir, "live.py", LIVE.format(gate=str(gate)))
    env = {
        "DAGRUN_DB_URL": db_url,
        "DAGRUN_DAGS_FOLDER": str(dags_dir),
        "DAGRUN_HOME": str(tmp_path / "home"),
    }
    store = Store(db_url)
    sync_dags(store, str(dags_dir))
    history = History(store, tmp_path / "home" / "logs")
    history.dags.update({"live", "blocker"})
    old = datetime(2025, 1, 1, tzinfo=UTC)
    for i in range(HISTORY_RUNS):
        history.run(old + timedelta(hours=i), dag_id="live")
    scheduler = start_cli(
        "scheduler", "--workers", "2", "--poll", "0.2", env=env, log=tmp_path / "s.log"
    )
    trigger = Trigger(store)
    try:
        held = run_cli("trigger", "blocker", "--date", "2025-06-01", env=env)
        assert held.returncode == 0, held.stderr
        wait_until(
            lambda: blocker_states(store) == [RunState.RUNNING],
            60,
            what="the old blocker run to be running",
        )
        trigger.start()
        wait_until(lambda: len(trigger.made) >= 5, 30, what="runs triggered")
        clean = run_cli("db", "clean", "--before", CUTOFF, "--yes", "--batch-size", "10", env=env)
        made_during = len(trigger.made)
        assert clean.returncode == 0, clean.stdout + clean.stderr
        assert f"cleaned {HISTORY_RUNS:,} of {HISTORY_RUNS:,} runs…" in clean.stderr
        assert f"deleted, before 2026-01-01 00:00 {LOCAL}: {HISTORY_RUNS:,} runs" in clean.stdout
        wait_until(lambda: len(trigger.made) >= made_during + 5, 30, what="runs after the clean")
        trigger.stop.set()
        trigger.join(10)
        assert trigger.error is None, trigger.error

        assert blocker_states(store) == [RunState.RUNNING], "an active run was deleted"
        gate.touch()

        def all_ended() -> bool:
            found = {**states(store, "live"), **states(store, "blocker")}
            return all(s in (RunState.SUCCESS, RunState.FAILED) for s, _ in found.values())

        wait_until(all_ended, 120, interval=0.2, what="every run to end")
    finally:
        trigger.stop.set()
        code = stop_process(scheduler)
    live = states(store, "live")
    assert set(live) == set(trigger.made), "runs made during the clean are all there"
    assert {s for s, _ in live.values()} == {RunState.SUCCESS}
    assert blocker_states(store) == [RunState.SUCCESS]
    orphans = {
        table: db_rows(
            env, f"SELECT count(*) FROM {table} WHERE run_pk NOT IN (SELECT id FROM dag_run)"
        )[0][0]
        for table in ("task_instance", "task_attempt", "callback")
    }
    assert orphans == dict.fromkeys(orphans, 0)
    output = (tmp_path / "s.log").read_text()
    assert code == 0, output[-3000:]
    assert "Traceback" not in output and " ERROR " not in output, output[-3000:]
    store.dispose()

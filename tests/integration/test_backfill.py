"""``dagrun backfill`` as a user runs it: a subprocess per command on a fresh SQLite home.

Small generated DAGs with no-op tasks keep each test to a few seconds; the real pandas
pipeline has its own test (test_nightly_sales). The database is read directly with sqlite3,
so a check never goes through the code it checks.
"""

from __future__ import annotations

import itertools
import json
import os
import pty
import re
import subprocess
import threading
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.helpers import cli_json, dagrun_cmd, db_rows, run_cli, table_counts, write_dag

DAYS = [f"2026-01-0{day}" for day in range(1, 6)]
RANGE = ("--start", DAYS[0], "--end", DAYS[-1])
SUMMARY = re.compile(r"runs (\d+) succeeded, (\d+) failed; tasks (.+); (\d+\.\d)s$")

# extract fails on FAIL_ON; load is downstream of it; audit is independent.
FLAKY = """
from dagrun import DAG, task

FAIL_ON = {fail_on!r}

with DAG("flaky", schedule="@daily", start_date="2026-01-01", max_active_runs={max_active},
         default_args={{"retries": 0}}):

    @task(depends_on_past={depends_on_past})
    def extract(ds):
        print(f"extracting {{ds}}")
        if ds == FAIL_ON:
            raise ValueError(f"bad input on {{ds}}")
        return ds

    @task
    def load(day):
        print(f"loading {{day}}")

    @task
    def audit(ds):
        print(f"audit {{ds}}")

    load(extract())
    audit()
"""

# Runs that take a visible amount of time, to see their order and their overlap.
TIMED = """
import time
from dagrun import DAG, task

with DAG("timed", schedule="@daily", start_date="2026-01-01", max_active_runs=16):

    @task
    def first():
        time.sleep(0.2)

    @task
    def second():
        time.sleep(0.1)

    first() >> second()
"""

HOURLY = """
from dagrun import DAG, task

with DAG("hourly", schedule="@hourly", start_date="2025-12-01", timezone={tz!r}):

    @task
    def tick(ds, data_interval_start):
        print(f"ds={{ds}} start={{data_interval_start.isoformat()}}")

    tick()
"""


@pytest.fixture
def env(cli_env: dict[str, str], db_url: str) -> dict[str, str]:
    """The CLI's environment on SQLite and on PostgreSQL."""
    return {**cli_env, "DAGRUN_DB_URL": db_url}


def write_flaky(
    dags_dir: Path, fail_on: str | None = DAYS[2], max_active: int = 3, depends_on_past=False
) -> None:
    source = FLAKY.format(fail_on=fail_on, max_active=max_active, depends_on_past=depends_on_past)
    write_dag(dags_dir, "flaky.py", source)


def dagrun(*args: str, env: dict[str, str], timeout: float = 30) -> subprocess.CompletedProcess:
    return run_cli(*args, env=env, timeout=timeout)


def backfill(dag_id: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return dagrun("backfill", dag_id, *args, env=env)


def summary(result: subprocess.CompletedProcess) -> tuple[int, int, str]:
    """(runs succeeded, runs failed, tasks) from the last line on stdout."""
    match = SUMMARY.search(result.stdout.rstrip().splitlines()[-1])
    assert match, result.stdout
    return int(match[1]), int(match[2]), match[3]


def day(logical_date: str | datetime) -> str:
    """The UTC day of a logical date as either engine returns it."""
    return str(logical_date)[:10]


def attempts(env: dict[str, str]) -> dict[tuple[str, str], list[str]]:
    """(task_id, day of the logical date in UTC) -> outcomes of its attempts, in order."""
    rows = db_rows(
        env,
        "SELECT a.task_id, r.logical_date, a.outcome FROM task_attempt a "
        "JOIN dag_run r ON r.id = a.run_pk ORDER BY a.id",
    )
    found: dict[tuple[str, str], list[str]] = {}
    for task_id, logical_date, outcome in rows:
        found.setdefault((task_id, day(logical_date)), []).append(outcome)
    return found


def task_states(env: dict[str, str], dag_id: str, day: str) -> dict[str, str]:
    run = cli_json("runs", "show", dag_id, "--date", day, env=env)
    return {t["task_id"]: t["state"] for t in run["tasks"]}


def instant(value: str) -> datetime:
    return datetime.fromisoformat(value)


@pytest.mark.slow
def test_a_failing_date_fails_alone_and_rerun_failed_reruns_only_it(env, dags_dir):
    write_flaky(dags_dir)
    failed = backfill("flaky", *RANGE, env=env)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert summary(failed)[:2] == (4, 1)
    assert "dagrun tasks failed flaky" in failed.stderr
    assert f"--start {DAYS[0]} --end {DAYS[-1]} --rerun-failed" in failed.stderr
    assert "Traceback" not in failed.stderr

    (dead,) = cli_json("tasks", "failed", "flaky", env=env)
    assert {"dag_id", "task_id", "logical_date", "try_number", "error"} <= set(dead)
    assert (dead["dag_id"], dead["task_id"]) == ("flaky", "extract")
    assert dead["logical_date"] == f"{DAYS[2]}T00:00:00+00:00"
    assert dead["try_number"] == 1
    assert dead["error"] == f"ValueError: bad input on {DAYS[2]}"
    listed = dagrun("tasks", "failed", "flaky", env=env)
    assert listed.returncode == 0
    (line,) = [line for line in listed.stdout.splitlines() if line.startswith("flaky")]
    assert "extract" in line and DAYS[2] in line and f"bad input on {DAYS[2]}" in line

    runs = cli_json("runs", "list", "flaky", env=env)
    assert [r["state"] for r in runs] == ["success", "success", "failed", "success", "success"]
    assert task_states(env, "flaky", DAYS[2]) == {
        "extract": "failed",
        "load": "upstream_failed",
        "audit": "success",
    }
    assert task_states(env, "flaky", DAYS[3]) == dict.fromkeys(
        ["extract", "load", "audit"], "success"
    )

    # The same command again: the failed date is reported and kept, nothing changes.
    before = table_counts(env)
    again = backfill("flaky", *RANGE, env=env)
    assert again.returncode == 1, again.stdout + again.stderr
    (kept,) = [line for line in again.stderr.splitlines() if "skipped-failed" in line]
    assert DAYS[2] in kept and "--rerun-failed" in kept
    assert table_counts(env) == before

    write_flaky(dags_dir, fail_on=None)
    fixed = backfill("flaky", *RANGE, "--rerun-failed", env=env)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert summary(fixed)[:2] == (1, 0)
    assert [r["state"] for r in cli_json("runs", "list", "flaky", env=env)] == ["success"] * 5
    assert cli_json("tasks", "failed", "flaky", env=env) == []
    history = attempts(env)
    assert history.pop(("extract", DAYS[2])) == ["failed", "success"]
    assert history.pop(("load", DAYS[2])) == ["success"]  # upstream_failed never ran before
    assert len(history) == 3 * 5 - 2
    assert set(map(tuple, history.values())) == {("success",)}


@pytest.mark.slow
def test_depends_on_past_holds_later_dates_until_the_past_succeeds(env, dags_dir):
    write_flaky(dags_dir, max_active=2, depends_on_past=True)
    failed = backfill("flaky", *RANGE, env=env)  # must end, not wait forever
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "depends_on_past" in failed.stderr
    assert DAYS[3] in failed.stderr and DAYS[4] in failed.stderr
    history = attempts(env)
    assert ("extract", DAYS[3]) not in history and ("extract", DAYS[4]) not in history
    assert [r["state"] for r in cli_json("runs", "list", "flaky", env=env)][:3] == [
        "success",
        "success",
        "failed",
    ]

    write_flaky(dags_dir, fail_on=None, max_active=2, depends_on_past=True)
    fixed = backfill("flaky", *RANGE, "--rerun-failed", env=env)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert [r["state"] for r in cli_json("runs", "list", "flaky", env=env)] == ["success"] * 5
    spans = db_rows(
        env,
        "SELECT r.logical_date, a.started_at, a.ended_at FROM task_attempt a "
        "JOIN dag_run r ON r.id = a.run_pk WHERE a.task_id = 'extract' AND a.outcome = 'success' "
        "ORDER BY r.logical_date",
    )
    assert [day(logical) for logical, _, _ in spans] == DAYS
    for (_, _, past_end), (logical, start, _) in itertools.pairwise(spans):
        assert start >= past_end, f"extract of {day(logical)} started before its past ended"


@pytest.mark.slow
def test_reset_reruns_every_task_once_more_in_the_same_runs(cli_env, dags_dir):
    write_flaky(dags_dir, fail_on=None)
    days = ("--start", DAYS[0], "--end", DAYS[2])
    assert backfill("flaky", *days, env=cli_env).returncode == 0
    first = cli_json("runs", "list", "flaky", env=cli_env)
    reset = backfill("flaky", *days, "--reset", env=cli_env)
    assert reset.returncode == 0, reset.stdout + reset.stderr
    assert summary(reset)[:3] == (3, 0, "9 success")
    runs = cli_json("runs", "list", "flaky", env=cli_env)
    assert [r["run_id"] for r in runs] == [r["run_id"] for r in first]
    assert [r["state"] for r in runs] == ["success"] * 3
    history = attempts(cli_env)
    assert len(history) == 3 * 3
    assert set(map(tuple, history.values())) == {("success", "success")}
    detail = [json.loads(d) for (d,) in db_rows(cli_env, "SELECT detail FROM audit_log")]
    assert [d["actions"] for d in detail] == [{"create": 3}, {"reset and rerun": 3}]


@pytest.mark.slow
def test_dry_run_prints_the_plan_and_changes_nothing(cli_env, dags_dir):
    write_flaky(dags_dir)
    assert backfill("flaky", "--start", DAYS[0], "--end", DAYS[2], env=cli_env).returncode == 1
    before = table_counts(cli_env)
    assert before["dag_run"] == 3

    plan = backfill("flaky", "--start", DAYS[0], "--end", DAYS[4], "--dry-run", env=cli_env)
    assert plan.returncode == 0, plan.stdout + plan.stderr
    rows = {line.split()[0]: line for line in plan.stdout.splitlines() if line[:4] == "2026"}
    assert list(rows) == DAYS
    assert rows[DAYS[0]].endswith("skip (already succeeded)")
    assert "failed" in rows[DAYS[2]] and "--rerun-failed" in rows[DAYS[2]]
    assert rows[DAYS[3]].endswith("create") and rows[DAYS[4]].endswith("create")
    assert "2 of 5 date(s) would run; nothing was changed" in plan.stdout

    reset = backfill("flaky", *RANGE, "--dry-run", "--reset", env=cli_env)
    assert reset.returncode == 0
    actions = [line.rsplit("  ", 1)[-1] for line in reset.stdout.splitlines() if line[:4] == "2026"]
    assert actions == ["reset and rerun"] * 3 + ["create"] * 2
    assert table_counts(cli_env) == before


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("nope", *RANGE), ["unknown DAG 'nope'"]),
        (("flaky", "--start", DAYS[3], "--end", DAYS[1]), ["before start"]),
        (("flaky", "--start", "2026-13-01", "--end", DAYS[1]), ["2026-13-01"]),
        (("flaky", "--start", "yesterday", "--end", DAYS[1]), ["yesterday"]),
        (("flaky", "--start", "2025-06-01", "--end", "2025-06-30"), ["no scheduled"]),
        (("flaky", *RANGE, "--rerun-failed", "--reset"), ["--rerun-failed", "--reset"]),
        (("flaky", *RANGE, "--max-active-runs", "0"), ["--max-active-runs"]),
    ],
    ids=["unknown-dag", "end-before-start", "bad-date", "unparsable", "no-dates", "two-modes", "0"],
)
def test_bad_input_exits_2_with_one_line_and_changes_nothing(cli_env, dags_dir, args, words):
    write_flaky(dags_dir)
    result = backfill(*args, env=cli_env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.lower().startswith("error")]
    assert len(lines) == 1, result.stderr
    for word in words:
        assert word in lines[0]
    if Path(cli_env["DAGRUN_DB_URL"].removeprefix("sqlite:///")).exists():
        assert db_rows(cli_env, "SELECT count(*) FROM dag_run") == [(0,)]


def test_reverse_is_refused_with_depends_on_past(cli_env, dags_dir):
    write_flaky(dags_dir, depends_on_past=True)
    result = backfill("flaky", *RANGE, "--reverse", env=cli_env)
    assert result.returncode == 2
    assert "depends_on_past" in result.stderr and "Traceback" not in result.stderr


def run_spans(env: dict[str, str], dag_id: str) -> list[tuple[str, datetime, datetime]]:
    runs = cli_json("runs", "list", dag_id, env=env)
    assert {r["state"] for r in runs} == {"success"}
    return [(r["logical_date"], instant(r["start_date"]), instant(r["end_date"])) for r in runs]


def most_at_once(spans: list[tuple[str, datetime, datetime]]) -> int:
    """The largest number of runs active at one instant (a run is active in [start, end))."""
    return max(sum(s <= start < e for _, s, e in spans) for _, start, _ in spans)


@pytest.mark.slow
def test_reverse_runs_newest_first(cli_env, dags_dir):
    write_dag(dags_dir, "timed.py", TIMED)
    done = backfill("timed", *RANGE, "--reverse", "--max-active-runs", "1", env=cli_env)
    assert done.returncode == 0, done.stdout + done.stderr
    spans = run_spans(cli_env, "timed")
    by_start = [logical for logical, _, _ in sorted(spans, key=lambda s: s[1])]
    assert by_start == sorted(by_start, reverse=True)
    assert len(by_start) == 5
    assert most_at_once(spans) == 1


@pytest.mark.slow
@pytest.mark.parametrize("limit", [1, 2])
def test_max_active_runs_is_never_exceeded(cli_env, dags_dir, limit):
    write_dag(dags_dir, "timed.py", TIMED)
    done = backfill("timed", *RANGE, "--max-active-runs", str(limit), "--workers", "4", env=cli_env)
    assert done.returncode == 0, done.stdout + done.stderr
    spans = run_spans(cli_env, "timed")
    assert len(spans) == 5
    assert most_at_once(spans) == limit
    by_start = [logical for logical, _, _ in sorted(spans, key=lambda s: (s[1], s[0]))]
    assert by_start == sorted(by_start)  # oldest first


@pytest.mark.parametrize(
    ("tz", "local_midnight_utc"),
    [("UTC", "2026-01-01T00:00:00+00:00"), ("Asia/Dhaka", "2025-12-31T18:00:00+00:00")],
)
@pytest.mark.slow
def test_a_date_only_range_is_whole_local_days(cli_env, dags_dir, tz, local_midnight_utc):
    write_dag(dags_dir, "hourly.py", HOURLY.format(tz=tz))
    done = backfill("hourly", "--start", "2026-01-01", "--end", "2026-01-01", env=cli_env)
    assert done.returncode == 0, done.stdout + done.stderr
    runs = cli_json("runs", "list", "hourly", env=cli_env)
    first = instant(local_midnight_utc)
    assert [instant(r["logical_date"]) for r in runs] == [
        first + timedelta(hours=h) for h in range(24)
    ]
    assert {r["run_type"] for r in runs} == {"backfill"}
    last = dagrun("logs", "hourly", "tick", runs[-1]["logical_date"], env=cli_env)
    assert last.returncode == 0, last.stderr
    assert "ds=2026-01-01 start=2026-01-01T23:00:00" in last.stdout


def test_progress_is_plain_lines_off_a_terminal_and_ends_with_a_summary(cli_env, dags_dir):
    write_flaky(dags_dir)
    result = backfill("flaky", *RANGE, env=cli_env)
    assert "\r" not in result.stderr and "\x1b" not in result.stderr
    progress = [line for line in result.stderr.splitlines() if "tasks/s" in line]
    assert progress, result.stderr
    assert all(re.match(r"runs \d+/5 \(ok \d+, failed \d+\)\s+tasks \d+/15", p) for p in progress)
    assert "[#" not in result.stderr and "[." not in result.stderr  # no bar in a log
    ok, failed, tasks = summary(result)[:3]
    assert (ok, failed) == (4, 1)
    assert tasks == "1 failed, 13 success, 1 upstream_failed"


@pytest.mark.slow
def test_progress_redraws_one_line_on_a_terminal(cli_env, dags_dir):
    write_dag(dags_dir, "timed.py", TIMED)
    main, follower = pty.openpty()
    process = subprocess.Popen(
        dagrun_cmd("backfill", "timed", *RANGE),
        env={**os.environ, **cli_env},
        stdout=subprocess.PIPE,
        stderr=follower,
        text=True,
    )
    os.close(follower)
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                data = os.read(main, 4096)
            except OSError:
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    stdout, _ = process.communicate(timeout=30)
    reader.join(10)
    os.close(main)
    terminal = b"".join(chunks).decode()
    assert process.returncode == 0, stdout + terminal
    assert "\r\x1b[K[" in terminal
    assert re.search(r"runs \d/5 .* tasks \d+/10 .* tasks/s", terminal)
    assert re.search(r"runs 5 succeeded, 0 failed; tasks 10 success; \d+\.\ds", stdout)

"""Guards of the command line, as a user meets them in a shell: bad input is one line on
stderr and exit 2, a huge backfill asks first and plans as a stream, and outputs that could
mislead (a log without its last newline, dates a minute apart, a hint to backfill a DAG that
has no schedule) say what is true. A subprocess per command on a fresh SQLite home."""

from __future__ import annotations

import importlib.util
import json
import os
import pty
import queue
import re
import subprocess
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from dagrun.runtime.backfill import PAGE_DATES
from tests.helpers import cli_json, dagrun_cmd, db_rows, queue_run, run_cli, write_dag

DAILY = """
from dagrun import BashTask, DAG

with DAG("daily", schedule="@daily", start_date="2026-01-01", timezone={tz!r}):
    BashTask("hello", command="echo hello {{{{ ds }}}}")
"""

MANUAL = """
from dagrun import DAG, task

with DAG("manual", schedule=None, default_args={"retries": 0}):

    @task
    def only(run_id, try_number):
        print(f"{run_id} try {try_number}")

    only()
"""

# One run a second; tick fails at the instants in FAIL_AT.
SECONDS = """
from datetime import timedelta
from dagrun import DAG, task

FAIL_AT = {fail_at!r}

with DAG("seconds", schedule=timedelta(seconds={every}), start_date="2026-01-01",
         max_active_runs=32, default_args={{"retries": 0}}):

    @task
    def tick(logical_date):
        if logical_date.isoformat() in FAIL_AT:
            raise ValueError(f"bad second {{logical_date}}")

    tick()
"""

HOURLY_FOREVER = """
from dagrun import BashTask, DAG

with DAG("hourly", schedule="@hourly", start_date="2026-01-01"):
    BashTask("tick", command="true")
"""

DAILY_DELTA = """
from datetime import timedelta
from dagrun import BashTask, DAG

with DAG("every_day", schedule=timedelta(days=1), start_date="2026-01-01"):
    BashTask("tick", command="true")
"""

# The first attempt writes half a line and dies: its log does not end with a newline.
HALF_LINE = """
import os
import sys
from dagrun import DAG, task

with DAG("half_line", schedule="@daily", start_date="2026-01-01", default_args={"retries": 0}):

    @task
    def partial():
        sys.stdout.write("half a line")
        sys.stdout.flush()
        os._exit(3)

    @task
    def whole():
        print("a whole line")

    partial()
    whole()
"""

BAD_TASK = """
from dagrun import BashTask, DAG

with DAG("other", schedule=None):
    BashTask("t\\n", command="true")
"""

POOLED = """
from dagrun import DAG, task

with DAG("pooled", schedule=None):

    @task(pool="warehouse")
    def load():
        pass

    for _ in range(3):
        load()
"""

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(second: int) -> str:
    """The naive UTC timestamp ``second`` seconds after 2026-01-01T00:00 (a CLI date)."""
    return (T0 + timedelta(seconds=second)).strftime("%Y-%m-%dT%H:%M:%S")


def dagrun(*args: str, env: dict[str, str], **kwargs) -> subprocess.CompletedProcess:
    return run_cli(*args, env=env, timeout=kwargs.pop("timeout", 60), **kwargs)


def error_line(result: subprocess.CompletedProcess) -> str:
    """The one line of a refused command: exit 2, nothing else on stderr, no traceback."""
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines[0]
    return lines[0]


def run_count(env: dict[str, str]) -> int:
    if not Path(env["DAGRUN_DB_URL"].removeprefix("sqlite:///")).exists():
        return 0
    return db_rows(env, "SELECT count(*) FROM dag_run")[0][0]


def write_seconds(dags_dir: Path, fail_at: tuple[str, ...] = (), every: int = 1) -> None:
    write_dag(dags_dir, "seconds.py", SECONDS.format(fail_at=fail_at, every=every))


# ---------------------------------------------------------------- --db


def test_a_db_value_that_is_not_a_url_is_one_line(cli_env):
    line = error_line(dagrun("--db", "notaurl", "dags", "list", env=cli_env))
    assert "'notaurl'" in line and "not a database URL" in line


def _mysql_driver_installed() -> bool:
    return any(importlib.util.find_spec(name) for name in ("MySQLdb", "pymysql"))


@pytest.mark.skipif(_mysql_driver_installed(), reason="a MySQL driver is installed here")
def test_a_db_url_whose_driver_is_missing_is_one_line(cli_env):
    line = error_line(dagrun("--db", "mysql://x@y/z", "dags", "list", env=cli_env))
    assert "mysql" in line


@pytest.mark.skipif(_mysql_driver_installed(), reason="a MySQL driver is installed here")
def test_a_db_url_whose_driver_is_missing_says_what_to_pip_install(cli_env):
    line = error_line(dagrun("--db", "mysql://x@y/z", "dags", "list", env=cli_env))
    assert "pip install" in line


# ---------------------------------------------------------------- dates datetime cannot hold


@pytest.mark.parametrize(
    ("tz", "args", "words"),
    [
        ("UTC", ("backfill", "daily", "--start", "0001-01-01", "--end", "9999-12-31",
                 "--dry-run"), ["--end 9999-12-31"]),
        ("Asia/Dhaka", ("backfill", "daily", "--start", "0001-01-01", "--end", "2026-01-02",
                        "--dry-run"), ["--start 0001-01-01"]),
        ("UTC", ("clear", "daily", "--start", "2026-01-01", "--end", "9999-12-31", "--yes"),
         ["--end 9999-12-31"]),
        ("UTC", ("runs", "show", "daily", "--date", "9999-12-31"), ["9999-12-31"]),
        ("UTC", ("dags", "next", "daily", "--after", "9999-12-31T23:59:59-05:00"),
         ["--after 9999-12-31T23:59:59-05:00"]),
    ],
    ids=["backfill-end", "backfill-start-east-of-utc", "clear", "runs-show", "dags-next"],
)  # fmt: skip
def test_dates_datetime_cannot_hold_are_one_line(cli_env, dags_dir, tz, args, words):
    write_dag(dags_dir, "daily.py", DAILY.format(tz=tz))
    line = error_line(dagrun(*args, env=cli_env))
    for word in [*words, "out of range", "0001-01-02 to 9999-12-30", "starts at 2026-01-01"]:
        assert word in line
    assert run_count(cli_env) == 0


def test_a_timedelta_schedule_ends_its_plan_where_datetime_ends(cli_env, dags_dir):
    """The interval of 9999-12-31 would end in year 10000: the plan stops before it."""
    write_dag(dags_dir, "every_day.py", DAILY_DELTA)
    plan = dagrun(
        "backfill", "every_day", "--start", "9999-12-29", "--end", "9999-12-31T12:00:00+00:00",
        "--dry-run", env=cli_env,
    )  # fmt: skip
    assert plan.returncode == 0, plan.stdout + plan.stderr
    rows = [line.split()[0] for line in plan.stdout.splitlines() if line.startswith("9999")]
    assert rows == ["9999-12-29", "9999-12-30"]
    assert "2 of 2 date(s) would run" in plan.stdout
    line = error_line(dagrun("dags", "next", "every_day", "--after", "9999-12-29", env=cli_env))
    assert "--after 9999-12-29" in line and "past 9999-12-31" in line


# ---------------------------------------------------------------- backfill: stream, confirm


def read_lines(process: subprocess.Popen, count: int, deadline: float) -> list[str]:
    """The first ``count`` lines of ``process``'s stdout, or fail at ``deadline`` seconds."""
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in process.stdout:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    end = time.monotonic() + deadline
    got = []
    while len(got) < count:
        try:
            got.append(lines.get(timeout=max(0.0, end - time.monotonic())))
        except queue.Empty:
            raise AssertionError(f"only {len(got)} line(s) within {deadline}s: {got}") from None
    return got


def test_a_dry_run_over_millennia_prints_its_first_dates_at_once(cli_env, dags_dir):
    """70 million hourly dates: a plan built before printing would take many minutes and
    gigabytes before its first row; a streamed one prints it at once."""
    write_dag(dags_dir, "hourly.py", HOURLY_FOREVER)
    assert dagrun("dags", "list", env=cli_env).returncode == 0  # synced: the deadline is the plan's
    process = subprocess.Popen(
        dagrun_cmd("backfill", "hourly", "--start", "0001-01-02", "--end", "9999-12-30",
                   "--dry-run"),
        env={**os.environ, **cli_env},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )  # fmt: skip
    try:
        header, *rows = read_lines(process, 4, deadline=30)
    finally:
        process.kill()
        process.wait(30)
    assert header.split("  ")[0] == "logical date (local)"
    assert [row.split()[:2] for row in rows] == [
        ["2026-01-01", "00:00"],
        ["2026-01-01", "01:00"],
        ["2026-01-01", "02:00"],
    ]
    assert all(row.rstrip().endswith("create") for row in rows)
    assert run_count(cli_env) == 0


def test_a_dry_run_marks_existing_runs_on_both_sides_of_a_page(cli_env, dags_dir):
    """Existing runs are read a page of dates at a time: the last date of one page and the
    first of the next both keep their state."""
    edge = PAGE_DATES  # index of the first date of the second page
    failing = (at(edge - 1), at(edge))
    write_seconds(dags_dir, fail_at=tuple(f"{t}+00:00" for t in failing))
    done = dagrun("backfill", "seconds", "--start", at(edge - 10), "--end", at(edge + 10),
                  env=cli_env)  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    last = 2 * PAGE_DATES - 1
    plan = dagrun("backfill", "seconds", "--start", at(0), "--end", at(last), "--dry-run",
                  env=cli_env)  # fmt: skip
    assert plan.returncode == 0, plan.stdout + plan.stderr
    rows = [line for line in plan.stdout.splitlines() if line.startswith("2026")]
    assert len(rows) == 2 * PAGE_DATES
    actions = {line.split()[1]: line.rsplit("  ", 1)[-1] for line in rows}
    expected = {}
    for second in range(last + 1):
        clock = at(second)[11:]
        if at(second) in failing:
            expected[clock] = "skip (failed; use --rerun-failed or --reset)"
        elif edge - 10 <= second <= edge + 10:
            expected[clock] = "skip (already succeeded)"
        else:
            expected[clock] = "create"
    assert actions == expected
    assert f"{2 * PAGE_DATES - 21} of {2 * PAGE_DATES} date(s) would run" in plan.stdout


def answer_on_a_terminal(args: tuple[str, ...], env: dict[str, str], answer: bytes):
    """Run ``dagrun ARGS`` with a terminal as stdin that has ``answer`` typed in."""
    main, follower = pty.openpty()
    try:
        process = subprocess.Popen(
            dagrun_cmd(*args),
            env={**os.environ, **env},
            stdin=follower,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        os.write(main, answer)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        os.close(follower)
        os.close(main)
    return process.returncode, stdout, stderr


@pytest.mark.slow
def test_more_than_10000_runs_need_yes_or_an_answer(cli_env, dags_dir):
    write_seconds(dags_dir)
    exactly = dagrun("backfill", "seconds", "--start", at(0), "--end", at(9_999), input="",
                     env=cli_env, timeout=300)  # fmt: skip
    assert exactly.returncode == 0, exactly.stdout + exactly.stderr
    assert "runs 10000 succeeded, 0 failed" in exactly.stdout
    assert run_count(cli_env) == 10_000

    # 20,001 dates, of which 10,001 have no run yet: more than 10,000 runs.
    wider = ("backfill", "seconds", "--start", at(0), "--end", at(20_000))
    refused = error_line(dagrun(*wider, input="", env=cli_env))
    assert "more than 10,000 runs" in refused and "pass --yes" in refused
    assert run_count(cli_env) == 10_000

    code, stdout, stderr = answer_on_a_terminal(wider, cli_env, b"n\n")
    assert code == 1, stdout + stderr
    assert "more than 10,000 runs; go on? [y/N]" in stdout
    assert run_count(cli_env) == 10_000

    plan = dagrun(*wider, "--dry-run", input="", env=cli_env)
    assert plan.returncode == 0, plan.stderr
    assert "10001 of 20001 date(s) would run" in plan.stdout
    assert run_count(cli_env) == 10_000

    done = dagrun(*wider, "--yes", input="", env=cli_env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "runs 10001 succeeded, 0 failed" in done.stdout
    assert run_count(cli_env) == 20_001


# ---------------------------------------------------------------- ids


@pytest.mark.slow
def test_ids_with_a_trailing_newline_are_refused(cli_env, dags_dir):
    write_dag(dags_dir, "daily.py", DAILY.format(tz="UTC"))
    write_dag(dags_dir, "bad_dag.py", MANUAL.replace('"manual"', '"manual\\n"'))
    write_dag(dags_dir, "bad_task.py", BAD_TASK)
    listed = dagrun("dags", "errors", "--json", env=cli_env)
    assert listed.returncode == 1, listed.stderr
    errors = {Path(e["file"]).name: e["error"] for e in json.loads(listed.stdout)}
    assert set(errors) == {"bad_dag.py", "bad_task.py"}
    assert "DAG id 'manual\\n'" in errors["bad_dag.py"]
    assert "task id 't\\n'" in errors["bad_task.py"]
    assert [d["dag_id"] for d in cli_json("dags", "list", env=cli_env)] == ["daily"]

    line = error_line(dagrun("run", "daily", "--date", "2026-01-02", "--run-id", "fix\n",
                             env=cli_env))  # fmt: skip
    assert "--run-id 'fix\\n'" in line
    assert error_line(dagrun("run", "daily", "--run-id", "..", env=cli_env))
    assert run_count(cli_env) == 0

    assert "pool id 'db\\n'" in error_line(dagrun("pools", "set", "db\n", "2", env=cli_env))
    assert "pool id 'db\\n'" in error_line(dagrun("pools", "delete", "db\n", env=cli_env))
    assert cli_json("pools", "list", env=cli_env) == []
    assert "unknown DAG 'daily\\n'" in error_line(dagrun("runs", "list", "daily\n", env=cli_env))


# ---------------------------------------------------------------- usage errors


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("backfill", "daily", "--end", "2026-01-02"),
         "missing option '--start' / '-s' (see `{prog} backfill --help`)"),
        (("backfill",), "missing argument 'DAG_ID' (see `{prog} backfill --help`)"),
        (("backfill", "daily", "-s", "2026-01-01", "-e", "2026-01-02", "--workers", "0"),
         "invalid value for '--workers': 0 is not in the range x>=1 "
         "(see `{prog} backfill --help`)"),
        (("runs", "list", "daily", "--state", "done"),
         "invalid value for '--state': 'done' is not one of 'waiting', 'queued', 'running', "
         "'success', 'failed' (see `{prog} runs list --help`)"),
        (("frobnicate",), "no such command 'frobnicate' (see `{prog} --help`)"),
        (("runs", "list", "daily", "--bogus"),
         "no such option '--bogus' (see `{prog} runs list --help`)"),
        (("runs", "list", "daily", "extra"),
         "got unexpected extra argument (extra) (see `{prog} runs list --help`)"),
    ],
    ids=["missing-option", "missing-argument", "bad-range", "bad-choice", "unknown-command",
         "unknown-option", "extra-argument"],
)  # fmt: skip
def test_usage_errors_are_one_line(cli_env, dags_dir, args, expected):
    write_dag(dags_dir, "daily.py", DAILY.format(tz="UTC"))
    result = dagrun(*args, env=cli_env)
    assert error_line(result) == "error: " + expected.format(prog="dagrun")
    assert result.stdout == ""


def test_help_still_prints_the_full_help(cli_env):
    result = dagrun("backfill", "--help", env=cli_env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Usage: ")
    for option in ("--start", "--end", "--dry-run", "--yes", "--reverse", "--help"):
        assert option in result.stdout
    group = dagrun("runs", env=cli_env)  # a group alone answers with its help
    assert "Usage: " in group.stderr and "list" in group.stderr and "show" in group.stderr


# ---------------------------------------------------------------- clear, runs list, logs


def attempts_of(env: dict[str, str], task_id: str) -> int:
    return db_rows(env, f"SELECT count(*) FROM task_attempt WHERE task_id = '{task_id}'")[0][0]


@pytest.mark.slow
def test_clear_of_a_manual_only_dag_points_to_its_run_not_to_backfill(cli_env, dags_dir):
    write_dag(dags_dir, "manual.py", MANUAL)
    write_dag(dags_dir, "daily.py", DAILY.format(tz="UTC"))
    first = dagrun("run", "manual", "--date", "2026-01-05", "--run-id", "by-hand", env=cli_env)
    assert first.returncode == 0, first.stdout + first.stderr
    range_ = ("--start", "2026-01-01", "--end", "2026-01-31", "--yes")
    cleared = dagrun("clear", "manual", *range_, env=cli_env)
    assert cleared.returncode == 0, cleared.stdout + cleared.stderr
    assert "backfill" not in cleared.stdout
    assert "the scheduler will run them again" in cleared.stdout
    assert "`dagrun run manual --run-id by-hand`" in cleared.stdout

    again = dagrun("run", "manual", "--run-id", "by-hand", env=cli_env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "resuming" in again.stderr
    assert "run by-hand: success" in again.stdout
    assert attempts_of(cli_env, "only") == 2
    done = dagrun("run", "manual", "--run-id", "by-hand", env=cli_env)
    assert "already exists (success); nothing to do" in done.stdout
    assert attempts_of(cli_env, "only") == 2

    assert dagrun("backfill", "daily", "-s", "2026-01-01", "-e", "2026-01-01",
                  env=cli_env).returncode == 0  # fmt: skip
    scheduled = dagrun("clear", "daily", *range_, env=cli_env)
    assert "`dagrun backfill`" in scheduled.stdout


LOCAL_DATE = re.compile(r"  (\d{4}-\d{2}-\d{2} \d{2}:\d{2}(?::\d{2})?) UTC  ")


def local_dates(result: subprocess.CompletedProcess) -> list[str]:
    assert result.returncode == 0, result.stderr
    return [LOCAL_DATE.search(line)[1] for line in result.stdout.splitlines()[1:]]


@pytest.mark.slow
def test_runs_list_shows_seconds_when_runs_are_under_a_minute_apart(cli_env, dags_dir):
    write_seconds(dags_dir, every=10)
    write_dag(dags_dir, "daily.py", DAILY.format(tz="UTC"))
    done = dagrun("backfill", "seconds", "--start", at(0), "--end", at(30), env=cli_env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert local_dates(dagrun("runs", "list", "seconds", env=cli_env)) == [
        "2026-01-01 00:00:00",
        "2026-01-01 00:00:10",
        "2026-01-01 00:00:20",
        "2026-01-01 00:00:30",
    ]
    plan = dagrun("backfill", "seconds", "--start", at(0), "--end", at(40), "--dry-run",
                  env=cli_env)  # fmt: skip
    assert "2026-01-01 00:00:40 UTC  2026-01-01 00:00:40Z" in plan.stdout

    assert dagrun("backfill", "daily", "-s", "2026-01-01", "-e", "2026-01-02",
                  env=cli_env).returncode == 0  # fmt: skip
    assert local_dates(dagrun("runs", "list", "daily", env=cli_env)) == [
        "2026-01-01 00:00",
        "2026-01-02 00:00",
    ]


def test_logs_end_with_a_newline_then_a_footer(cli_env, dags_dir):
    write_dag(dags_dir, "half_line.py", HALF_LINE)
    day = ("--start", "2026-01-01", "--end", "2026-01-01")
    assert dagrun("backfill", "half_line", *day, env=cli_env).returncode == 1
    for task_id, ending in (("partial", "\nhalf a line\n"), ("whole", "task: success\n")):
        result = dagrun("logs", "half_line", task_id, "2026-01-01", env=cli_env)
        assert result.returncode == 0, result.stderr
        assert result.stdout.endswith(ending) and not result.stdout.endswith("\n\n")
        logged = len(result.stdout.encode()) - (task_id == "partial")
        assert result.stderr.splitlines()[-1] == f"# end of try 1 ({logged} bytes)"


# ---------------------------------------------------------------- pools


def test_pools_list_shows_a_pool_that_tasks_wait_for_but_does_not_exist(cli_env, dags_dir):
    from dagrun.store import Store

    write_dag(dags_dir, "pooled.py", POOLED)
    store = Store(cli_env["DAGRUN_DB_URL"])
    try:
        queue_run(store, dags_dir, "pooled")
    finally:
        store.dispose()
    (row,) = cli_json("pools", "list", env=cli_env)
    assert (row["name"], row["exists"], row["slots"], row["queued"]) == (
        "warehouse", False, None, 3
    )  # fmt: skip
    table = dagrun("pools", "list", env=cli_env)
    assert table.returncode == 0, table.stderr
    (line,) = [line for line in table.stdout.splitlines() if line.startswith("warehouse")]
    assert line.split()[:4] == ["warehouse", "-", "0", "3"]
    assert "does not exist" in line and "dagrun pools set warehouse SLOTS" in line


def test_a_missing_pool_is_warned_of_only_where_it_matters(cli_env, dags_dir):
    """`dagrun run` of a DAG that names no pool says nothing of another DAG's missing pool
    (the scheduler and `pools list` do)."""
    write_dag(
        dags_dir,
        "pooled.py",
        """
        from dagrun import DAG, task

        with DAG("pooled", schedule=None):
            @task(pool="warehouse")
            def load():
                return 1

            load()
        """,
    )
    write_dag(
        dags_dir,
        "plain.py",
        """
        from dagrun import DAG, task

        with DAG("plain", schedule=None):
            @task
            def hello():
                return 1

            hello()
        """,
    )
    from dagrun.store import Store

    store = Store(cli_env["DAGRUN_DB_URL"])
    try:
        queue_run(store, dags_dir, "pooled", run_id="stuck")  # its task waits for the pool
    finally:
        store.dispose()
    plain = run_cli("run", "plain", env=cli_env)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert "warehouse" not in plain.stderr
    listed = run_cli("pools", "list", env=cli_env)
    assert "warehouse" in listed.stdout and "does not exist" in listed.stdout

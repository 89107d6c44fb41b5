"""``dagrun dags ...`` and ``dagrun db ...`` as a user runs them: a subprocess per command."""

from __future__ import annotations

import json
import shutil
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.helpers import cli_json, run_cli, write_dag

REPO = Path(__file__).resolve().parents[2]
TASKS_IN_ORDER = [
    ("extract_sales", "-"),
    ("clean_sales", "extract_sales"),
    ("load_customers", "-"),
    ("build_daily_summary", "clean_sales, load_customers"),
    ("refresh_dashboard", "build_daily_summary"),
]

SYNTAX_ERROR = """
    from dagrun import DAG, BashTask

    with DAG("broken"):
        BashTask("t", command="echo"
"""
CYCLE = """
    from dagrun import DAG, BashTask

    with DAG("cyclic"):
        a = BashTask("extract", command="echo")
        b = BashTask("transform", command="echo")
        a >> b >> a
"""
SLEEPS_FOREVER = """
    import time

    while True:
        time.sleep(60)
"""


@pytest.fixture
def env(cli_env: dict[str, str], dags_dir: Path) -> dict[str, str]:
    shutil.copy(REPO / "dags" / "nightly_sales.py", dags_dir / "nightly_sales.py")
    return {**cli_env, "DAGRUN_PARSE_TIMEOUT": "2"}


@pytest.fixture
def bad_env(env: dict[str, str], dags_dir: Path) -> dict[str, str]:
    write_dag(dags_dir, "broken.py", SYNTAX_ERROR)
    write_dag(dags_dir, "cyclic.py", CYCLE)
    write_dag(dags_dir / "team", "sleeper.py", SLEEPS_FOREVER)
    return env


def dagrun(*args: str, env: dict[str, str], timeout: float = 60):
    return run_cli(*args, env=env, timeout=timeout)


def json_out(*args: str, env: dict[str, str]):
    result = dagrun(*args, "--json", env=env)
    assert result.returncode in (0, 1), result.stderr
    return json.loads(result.stdout)


def assert_usage_error(result, *words: str) -> None:
    """Exit code 2, no traceback, and one error line naming the problem."""
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.lower().startswith("error")]
    assert len(lines) == 1, result.stderr
    for word in words:
        assert word in lines[0]


def test_dags_list_shows_schedule_and_timezone(env, dags_dir):
    result = dagrun("dags", "list", env=env)
    assert result.returncode == 0, result.stderr
    header, *rows = result.stdout.splitlines()
    assert header.split()[:4] == ["dag_id", "schedule", "timezone", "paused"]
    assert len(rows) == 1
    assert rows[0].startswith("nightly_sales")
    assert "30 0 * * *" in rows[0]
    assert "Asia/Dhaka" in rows[0]
    assert "nightly_sales.py" in rows[0]
    assert result.stderr == ""


def test_dags_list_json_has_the_fixed_fields(env, dags_dir):
    (entry,) = json_out("dags", "list", env=env)
    assert {"dag_id", "schedule", "timezone", "paused", "fileloc"} <= set(entry)
    assert entry["dag_id"] == "nightly_sales"
    assert entry["schedule"] == "30 0 * * *"
    assert entry["timezone"] == "Asia/Dhaka"
    assert entry["paused"] is False
    assert entry["fileloc"] == str(dags_dir / "nightly_sales.py")


def test_dags_list_on_an_empty_folder(cli_env):
    result = dagrun("dags", "list", env=cli_env)
    assert result.returncode == 0
    assert "no DAGs found" in result.stdout
    assert json_out("dags", "list", env=cli_env) == []


def test_dags_show_prints_tasks_in_topological_order_with_upstreams(env):
    result = dagrun("dags", "show", "nightly_sales", env=env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "nightly_sales" in lines[0]
    assert "30 0 * * *" in lines[0]
    assert "Asia/Dhaka" in lines[0]
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["#", "task_id"])
    rows = lines[header + 1 :]
    assert len(rows) == len(TASKS_IN_ORDER)
    for n, (row, (task_id, upstream)) in enumerate(zip(rows, TASKS_IN_ORDER, strict=True), 1):
        assert row.split()[:2] == [str(n), task_id]
        assert f"  {upstream}  " in row


@pytest.mark.slow
def test_bad_files_do_not_hide_the_good_dag(bad_env, dags_dir):
    started = time.monotonic()
    listed = dagrun("dags", "list", env=bad_env, timeout=30)
    elapsed = time.monotonic() - started
    assert listed.returncode == 0, listed.stderr
    assert elapsed < 15, f"dags list took {elapsed:.1f}s"
    assert "nightly_sales" in listed.stdout
    assert "Traceback" not in listed.stderr
    assert "3 DAG file(s) failed to load" in listed.stderr
    assert [d["dag_id"] for d in json_out("dags", "list", env=bad_env)] == ["nightly_sales"]

    errors = dagrun("dags", "errors", env=bad_env)
    assert errors.returncode == 1
    lines = errors.stdout.splitlines()
    assert len(lines) == 3, errors.stdout
    by_file = {Path(line.split(":")[0]).name: line for line in lines}
    assert set(by_file) == {"broken.py", "cyclic.py", "sleeper.py"}
    assert by_file["broken.py"].startswith(f"{dags_dir / 'broken.py'}:4: syntax error")
    assert "DAG 'cyclic' has a cycle: extract -> transform -> extract" in by_file["cyclic.py"]
    assert by_file["sleeper.py"].startswith(str(dags_dir / "team" / "sleeper.py"))
    assert "did not finish within 2 s" in by_file["sleeper.py"]

    documents = json_out("dags", "errors", env=bad_env)
    assert all({"file", "error"} <= set(d) for d in documents)
    reasons = {Path(d["file"]).name: d["error"] for d in documents}
    assert reasons["broken.py"].startswith("syntax error")
    assert "cycle" in reasons["cyclic.py"]
    assert "did not finish" in reasons["sleeper.py"]


@pytest.mark.slow
def test_dags_list_names_the_file_it_waits_for_before_the_timeout(cli_env, dags_dir):
    """A file that hangs at import: after half its limit (5 s at most) the command says
    which file it waits for, then the file fails as before."""
    slow = write_dag(dags_dir, "slow.py", SLEEPS_FOREVER)
    write_dag(dags_dir, "good.py", CYCLE.replace("a >> b >> a", "a >> b"))
    listed = dagrun("dags", "list", env={**cli_env, "DAGRUN_PARSE_TIMEOUT": "1"})
    assert listed.returncode == 0, listed.stderr
    assert listed.stderr.splitlines() == [
        f"waiting for {slow} to import (a file fails after 1 s: DAGRUN_PARSE_TIMEOUT)",
        "1 DAG file(s) failed to load; see `dagrun dags errors`",
    ]
    assert "cyclic" in listed.stdout


def test_dags_errors_exits_0_when_all_files_load(env):
    result = dagrun("dags", "errors", env=env)
    assert result.returncode == 0
    assert "no import errors" in result.stdout
    assert json_out("dags", "errors", env=env) == []


WARNED = """
    from airflow import DAG
    from airflow.operators.bash import BashOperator

    with DAG("warned", schedule=None, default_args={"owner": "data", "queue": "fast"}):
        BashOperator(task_id="a", bash_command="echo")
        BashOperator(task_id="b", bash_command="echo", run_as_user="etl")
"""


@pytest.mark.slow
def test_dags_errors_warnings_lists_each_files_warnings_with_lines(env, dags_dir):
    path = write_dag(dags_dir, "warned.py", WARNED)

    plain = dagrun("dags", "errors", env=env)
    assert (plain.returncode, plain.stdout) == (0, "no import errors\n")  # as before
    assert json_out("dags", "errors", env=env) == []

    listed = dagrun("dags", "errors", "--warnings", env=env)
    assert listed.returncode == 0, listed.stderr  # warnings never fail the command
    assert listed.stdout.splitlines() == [
        "no import errors",
        f"{path}:5: warning: owner: accepted but not acted on by dagrun",
        f"{path}:5: warning: queue: accepted but not acted on by dagrun",
        f"{path}:6: warning: run_as_user: accepted but not acted on by dagrun",
    ]
    assert json_out("dags", "errors", "--warnings", env=env) == {
        "errors": [],
        "warnings": [
            {"file": str(path), "line": 5, "message": "owner: accepted but not acted on by dagrun"},
            {"file": str(path), "line": 5, "message": "queue: accepted but not acted on by dagrun"},
            {
                "file": str(path),
                "line": 6,
                "message": "run_as_user: accepted but not acted on by dagrun",
            },
        ],
    }


@pytest.mark.slow
def test_dags_errors_warnings_keeps_the_exit_code_of_errors(bad_env, dags_dir):
    path = write_dag(dags_dir, "warned.py", WARNED)

    listed = dagrun("dags", "errors", "--warnings", env=bad_env)
    assert listed.returncode == 1
    lines = listed.stdout.splitlines()
    assert len(lines) == 6 and lines[3] == (
        f"{path}:5: warning: owner: accepted but not acted on by dagrun"
    )
    document = json_out("dags", "errors", "--warnings", env=bad_env)
    assert sorted(Path(e["file"]).name for e in document["errors"]) == [
        "broken.py",
        "cyclic.py",
        "sleeper.py",
    ]
    assert {w["file"] for w in document["warnings"]} == {str(path)}
    assert all(set(e) == {"file", "error", "line"} for e in document["errors"])

    write_dag(dags_dir, "warned.py", WARNED.replace(', run_as_user="etl"', ""))
    fewer = json_out("dags", "errors", "--warnings", env=bad_env)["warnings"]
    assert [w["message"].split(":")[0] for w in fewer] == ["owner", "queue"]


@pytest.mark.slow
def test_a_fixed_file_leaves_the_error_list(bad_env, dags_dir):
    assert dagrun("dags", "errors", env=bad_env).returncode == 1
    (dags_dir / "team" / "sleeper.py").unlink()
    write_dag(dags_dir, "cyclic.py", CYCLE.replace("a >> b >> a", "a >> b"))
    (dags_dir / "broken.py").unlink()
    assert dagrun("dags", "errors", env=bad_env).returncode == 0
    ids = sorted(d["dag_id"] for d in json_out("dags", "list", env=bad_env))
    assert ids == ["cyclic", "nightly_sales"]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("dags", "show", "nope"), ["unknown DAG 'nope'"]),
        (("dags", "next", "nope"), ["unknown DAG 'nope'"]),
        (("dags", "pause", "nope"), ["unknown DAG 'nope'"]),
        (("dags", "unpause", "nope"), ["unknown DAG 'nope'"]),
        (("dags", "list", "--bogus"), ["--bogus"]),
        (("dags", "show"), ["DAG_ID"]),
        (("dags", "frobnicate"), ["frobnicate"]),
        (("dags", "next", "nightly_sales", "-n", "0"), ["0"]),
        (("dags", "next", "nightly_sales", "--after", "someday"), ["someday"]),
        (("dags", "show", "nightly_sales", "--format", "png"), ["--format", "png"]),
    ],
    ids=lambda value: "-".join(value) if isinstance(value, tuple) else None,
)
def test_bad_input_exits_2_with_one_line_and_no_traceback(env, args, words):
    assert_usage_error(dagrun(*args, env=env), *words)


@pytest.mark.slow
def test_pause_and_unpause_round_trip(env):
    assert [d["paused"] for d in json_out("dags", "list", env=env)] == [False]
    paused = dagrun("dags", "pause", "nightly_sales", env=env)
    assert paused.returncode == 0, paused.stderr
    assert "paused" in paused.stdout
    assert [d["paused"] for d in json_out("dags", "list", env=env)] == [True]
    unpaused = dagrun("dags", "unpause", "nightly_sales", env=env)
    assert unpaused.returncode == 0, unpaused.stderr
    assert [d["paused"] for d in json_out("dags", "list", env=env)] == [False]


def test_db_init_and_check(cli_env, tmp_path):
    init = dagrun("db", "init", env=cli_env)
    assert init.returncode == 0, init.stderr
    assert "schema version" in init.stdout
    assert (tmp_path / "home" / "dagrun.db").exists()
    again = dagrun("db", "init", env=cli_env)
    assert again.returncode == 0, again.stderr
    check = dagrun("db", "check", env=cli_env)
    assert check.returncode == 0, check.stderr
    assert check.stdout.startswith("ok:")


def test_db_check_on_a_newer_database_fails_cleanly(cli_env):
    from sqlalchemy import update

    from dagrun.store import Store
    from dagrun.store.schema import SCHEMA_VERSION, meta

    store = Store(cli_env["DAGRUN_DB_URL"])
    with store.write() as conn:
        conn.execute(update(meta).values(value=str(SCHEMA_VERSION + 1)))
    store.dispose()
    check = dagrun("db", "check", env=cli_env)
    assert check.returncode == 1
    assert "Traceback" not in check.stderr
    assert "newer than this dagrun" in check.stderr


def test_dags_next_json(env):
    entries = json_out(
        "dags", "next", "nightly_sales", "-n", "3", "--after", "2026-03-01T00:00:00+00:00", env=env
    )
    assert len(entries) == 3
    assert all(
        {"logical_date", "data_interval_end", "local_logical_date"} <= set(e) for e in entries
    )
    # 30 0 * * * in Asia/Dhaka (+06) fires at 18:30 UTC the day before.
    assert [e["logical_date"] for e in entries] == [
        "2026-03-01T18:30:00+00:00",
        "2026-03-02T18:30:00+00:00",
        "2026-03-03T18:30:00+00:00",
    ]
    assert [e["data_interval_end"] for e in entries] == [
        "2026-03-02T18:30:00+00:00",
        "2026-03-03T18:30:00+00:00",
        "2026-03-04T18:30:00+00:00",
    ]
    assert [e["local_logical_date"] for e in entries] == [
        "2026-03-02T00:30:00+06:00",
        "2026-03-03T00:30:00+06:00",
        "2026-03-04T00:30:00+06:00",
    ]


def test_dags_next_starts_from_the_next_run_dags_list_shows(env):
    """catchup=True and no run yet: the first run is at start_date, in Dhaka."""
    (listed,) = json_out("dags", "list", env=env)
    entries = json_out("dags", "next", "nightly_sales", "-n", "3", env=env)
    assert len(entries) == 3
    assert entries[0]["logical_date"] == listed["next_logical_date"]
    assert entries[0]["local_logical_date"] == "2026-01-01T00:30:00+06:00"


@pytest.mark.slow
def test_every_dags_command_has_help(env):
    for command in ("list", "show", "next", "errors", "pause", "unpause"):
        result = dagrun("dags", command, "--help", env=env)
        assert result.returncode == 0, command
        assert "Usage:" in result.stdout


def test_next_run_follows_the_catchup_policy(cli_env, dags_dir):
    """catchup=True starts from start_date; catchup=False from the latest complete interval."""
    for dag_id, catchup in (("with_catchup", True), ("without_catchup", False)):
        write_dag(
            dags_dir,
            f"{dag_id}.py",
            f"""
            from dagrun import DAG, BashTask

            with DAG("{dag_id}", schedule="@daily", start_date="2020-01-01", catchup={catchup}):
                BashTask("t", command="echo")
            """,
        )
    before = datetime.now(UTC)
    listed = {d["dag_id"]: d["next_logical_date"] for d in json_out("dags", "list", env=cli_env)}
    after = datetime.now(UTC)
    assert listed["with_catchup"] == "2020-01-01T00:00:00+00:00"
    yesterday = {
        (moment.replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=1)).isoformat()
        for moment in (before, after)
    }
    assert listed["without_catchup"] in yesterday


def test_output_of_dag_files_at_import_does_not_reach_the_cli_output(cli_env, dags_dir):
    write_dag(
        dags_dir,
        "noisy.py",
        """
        import sys
        from dagrun import DAG, BashTask

        print("hello from import")
        print("to stderr", file=sys.stderr)
        with DAG("noisy"):
            BashTask("t", command="echo")
        """,
    )
    result = dagrun("dags", "list", "--json", env=cli_env)
    assert result.returncode == 0, result.stderr
    assert [d["dag_id"] for d in json.loads(result.stdout)] == ["noisy"]
    assert "hello" not in result.stdout
    assert "to stderr" not in result.stderr


@pytest.mark.slow
def test_a_broken_edit_keeps_the_dag_runnable_with_its_error_beside_it(cli_env, dags_dir):
    """Adding a ``raise`` to a DAG file: the DAG is still listed (the error beside it),
    `dags errors` reports the file, and `run` runs the last good version."""
    path = write_dag(
        dags_dir,
        "kept.py",
        """
        from dagrun import DAG, BashTask

        with DAG("kept", schedule=None):
            BashTask("t", command="echo last good")
        """,
    )
    assert run_cli("dags", "list", env=cli_env).returncode == 0
    path.write_text(path.read_text() + "\nraise RuntimeError('half-finished edit')\n")
    listed = run_cli("dags", "list", env=cli_env)
    line = next(x for x in listed.stdout.splitlines() if x.startswith("kept "))
    assert "runs as last parsed: RuntimeError: half-finished edit" in line, listed.stdout
    assert cli_json("dags", "list", env=cli_env)[0]["import_error"].startswith("RuntimeError")
    errors = run_cli("dags", "errors", env=cli_env)
    assert errors.returncode == 1 and "kept.py" in errors.stdout
    ran = run_cli("run", "kept", env=cli_env)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    path.unlink()
    assert "kept" not in run_cli("dags", "list", env=cli_env).stdout


GROUPED = """
    from dagrun import DAG, BashTask, TaskGroup, task_group

    @task_group
    def clean():
        BashTask("dedupe", command="echo") >> BashTask("check", command="echo")

    with DAG("grouped", schedule=None):
        with TaskGroup("ingest") as ingest:
            BashTask("extract", command="echo") >> clean()
        ingest >> BashTask("report", command="echo")
"""


@pytest.mark.slow
def test_dags_show_draws_groups_as_a_table_json_and_mermaid(cli_env, dags_dir):
    write_dag(dags_dir, "grouped.py", GROUPED)
    table = dagrun("dags", "show", "grouped", env=cli_env)
    assert table.returncode == 0, table.stderr
    rows = [line.split() for line in table.stdout.splitlines()[2:]]
    assert rows[0][:3] == ["#", "task_id", "group"]
    assert [row[1:3] for row in rows[1:]] == [
        ["ingest.extract", "ingest"],
        ["ingest.clean.dedupe", "ingest.clean"],
        ["ingest.clean.check", "ingest.clean"],
        ["report", "-"],
    ]

    shown = dagrun("dags", "show", "grouped", "--format", "json", env=cli_env)
    assert shown.returncode == 0, shown.stderr
    document = json.loads(shown.stdout)
    assert document["dag_id"] == "grouped"
    assert {t["task_id"]: t["group"] for t in document["tasks"]} == {
        "ingest.extract": "ingest",
        "ingest.clean.dedupe": "ingest.clean",
        "ingest.clean.check": "ingest.clean",
        "report": None,
    }
    assert document["edges"] == [
        ["ingest.extract", "ingest.clean.dedupe"],
        ["ingest.clean.dedupe", "ingest.clean.check"],
        ["ingest.clean.check", "report"],
    ]

    mermaid = dagrun("dags", "show", "grouped", "--format", "mermaid", env=cli_env)
    assert mermaid.returncode == 0, mermaid.stderr
    lines = mermaid.stdout.splitlines()
    assert lines[0] == "flowchart LR"
    assert '  subgraph g0 ["ingest"]' in lines
    assert '    subgraph g1 ["ingest.clean"]' in lines
    assert "  t2 --> t3" in lines


def test_dags_show_marks_setups_and_teardowns(cli_env, dags_dir):
    write_dag(
        dags_dir,
        "paired.py",
        """
        from dagrun import DAG, BashTask

        with DAG("paired"):
            make = BashTask("make", command="echo").as_setup()
            drop = BashTask("drop", command="echo")
            make >> BashTask("use", command="echo") >> drop.as_teardown(setups=make)
        """,
    )
    table = dagrun("dags", "show", "paired", env=cli_env)
    assert table.returncode == 0, table.stderr
    rows = [line.split() for line in table.stdout.splitlines()[3:]]
    assert [row[1:3] for row in rows] == [
        ["make", "(setup)"],
        ["use", "bash"],
        ["drop", "(teardown)"],
    ]
    assert rows[2][-2:] == ["all_done_setup_success", "0"]
    dot = dagrun("dags", "show", "paired", "--format", "dot", env=cli_env)
    assert '  "make" -> "drop" [style=dashed];' in dot.stdout.splitlines()


@pytest.mark.slow
def test_next_run_is_the_next_date_the_scheduler_will_really_create(cli_env, dags_dir):
    """A backfill ahead of the scheduler's cursor: the next run is after the backfilled
    range, not the cursor's date (which already has a run and would be skipped)."""
    from dagrun.store import Store
    from dagrun.webapp import WebApp
    from tests.webapp.test_webapp import call

    write_dag(
        dags_dir,
        "daily.py",
        """
        from dagrun import DAG, BashTask
        with DAG("daily", schedule="@daily", start_date="2026-01-01", catchup=True):
            BashTask("t", command="true")
        """,
    )
    before = cli_json("dags", "list", "--json", env=cli_env)[0]["next_logical_date"]
    assert before == "2026-01-01T00:00:00+00:00"
    done = dagrun("backfill", "daily", "--start", "2026-01-01", "--end", "2026-02-28", env=cli_env)
    assert done.returncode == 0, done.stderr
    after = cli_json("dags", "list", "--json", env=cli_env)[0]["next_logical_date"]
    assert after == "2026-03-01T00:00:00+00:00"
    assert "2026-03-01 00:00 UTC" in dagrun("dags", "list", env=cli_env).stdout
    store = Store(cli_env["DAGRUN_DB_URL"])
    try:
        [shown] = call(WebApp(store), "/api/dags").json()["dags"]
        page = call(WebApp(store), "/dags/daily/grid").text
    finally:
        store.dispose()
    assert shown["next_logical_date"] == after
    assert shown["next_due_at"] == "2026-03-02T00:00:00+00:00"
    assert "due <time" in page and "2026-03-02" in page


TRIGGERED = """
    from dagrun import DAG, BashTask, CronTrigger

    with DAG("triggered", schedule=CronTrigger("30 6 * * *"), timezone="Asia/Dhaka",
             start_date="2026-01-01"):
        BashTask("t", command="true")

    with DAG("covering", schedule=CronTrigger("30 0 * * *", interval="1h"),
             timezone="Asia/Dhaka", start_date="2026-01-01"):
        BashTask("t", command="true")
"""


@pytest.mark.slow
def test_a_trigger_schedule_through_list_next_run_and_backfill(cli_env, dags_dir):
    """A trigger schedule's runs are dated by their fire times (06:30 in Dhaka is 00:30
    UTC), which every command reads: the list, the next runs, run --date, backfill."""
    write_dag(dags_dir, "triggered.py", TRIGGERED)
    listed = {d["dag_id"]: d for d in json_out("dags", "list", env=cli_env)}
    assert listed["triggered"]["schedule"] == "trigger 30 6 * * *"
    assert listed["triggered"]["next_logical_date"] == "2026-01-01T00:30:00+00:00"
    assert listed["covering"]["schedule"] == "trigger 30 0 * * * covering 1:00:00"
    after = "2026-03-01T00:00:00+00:00"
    entries = json_out("dags", "next", "covering", "-n", "2", "--after", after, env=cli_env)
    # 00:30 in Dhaka is 18:30 UTC the day before; each run covers the hour before its fire
    assert [(e["logical_date"], e["data_interval_end"]) for e in entries] == [
        ("2026-03-01T17:30:00+00:00", "2026-03-01T18:30:00+00:00"),
        ("2026-03-02T17:30:00+00:00", "2026-03-02T18:30:00+00:00"),
    ]
    # its first fire, 00:30 on the start date, covers 23:30 the day before it
    done = dagrun(
        "backfill", "covering", "--start", "2025-12-31", "--end", "2026-01-01", env=cli_env
    )
    assert done.returncode == 0, done.stdout + done.stderr
    covered = json_out("runs", "list", "covering", env=cli_env)
    assert [r["logical_date"] for r in covered] == [
        "2025-12-31T17:30:00+00:00",
        "2026-01-01T17:30:00+00:00",
    ]
    done = dagrun("run", "triggered", "--date", "2026-01-05", env=cli_env)
    assert done.returncode == 0, done.stdout + done.stderr
    done = dagrun(
        "backfill", "triggered", "--start", "2026-01-01", "--end", "2026-01-02", env=cli_env
    )
    assert done.returncode == 0, done.stdout + done.stderr
    runs = json_out("runs", "list", "triggered", env=cli_env)
    assert [(r["logical_date"], r["run_type"], r["state"]) for r in runs] == [
        ("2026-01-01T00:30:00+00:00", "backfill", "success"),
        ("2026-01-02T00:30:00+00:00", "backfill", "success"),
        ("2026-01-05T00:30:00+00:00", "manual", "success"),
    ]

"""``dagrun run``, ``clear``, ``runs list|show``, ``logs``, ``test`` and ``tasks test`` as a
user runs them: a subprocess per command on a fresh SQLite home, the database read directly."""

from __future__ import annotations

import json
import os
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.helpers import cli_json, db_rows, run_cli, table_counts, write_dag

DAYS = ["2026-01-01", "2026-01-02", "2026-01-03"]
RANGE = ("--start", DAYS[0], "--end", DAYS[-1])

# a >> b >> c, and d on its own; b fails on FAIL_ON.
CHAIN = """
import os
from dagrun import DAG, task

FAIL_ON = {fail_on!r}

with DAG("chain", schedule="@daily", start_date="2026-01-01", max_active_runs=4,
         default_args={{"retries": 0}}):

    @task
    def a(ds, try_number):
        print(f"a ran for {{ds}} (try {{try_number}}, parent {{os.getppid()}})")

    @task(depends_on_past={depends_on_past})
    def b(ds):
        print(f"b ran for {{ds}}")
        if ds == FAIL_ON:
            raise RuntimeError(f"b cannot handle {{ds}}")
        return ds

    @task
    def c(day):
        print(f"c got {{day}}")

    @task
    def d(ds):
        print(f"d ran for {{ds}}")

    a() >> c(b())
    d()
"""

# The first attempt of shaky fails, the second succeeds.
RETRYING = """
from dagrun import DAG, task

with DAG("retrying", schedule="@daily", start_date="2026-01-01",
         default_args={"retries": 1, "retry_delay": 0}):

    @task
    def shaky(ds, try_number):
        print(f"shaky try {try_number} for {ds}")
        if try_number == 1:
            raise RuntimeError("the first try always fails")

    shaky()
"""


@pytest.fixture
def chain(cli_env: dict[str, str], dags_dir: Path) -> dict[str, str]:
    write_chain(dags_dir, fail_on=None)
    return cli_env


def write_chain(dags_dir: Path, fail_on: str | None, depends_on_past: bool = False) -> None:
    write_dag(dags_dir, "chain.py", CHAIN.format(fail_on=fail_on, depends_on_past=depends_on_past))


def dagrun(
    *args: str, env: dict[str, str], input: str | None = None
) -> subprocess.CompletedProcess:
    return run_cli(*args, env=env, timeout=30, input=input)


def ok(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    result = dagrun(*args, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def attempt_counts(env: dict[str, str]) -> dict[tuple[str, str], int]:
    """(task_id, UTC day of the logical date) -> attempts."""
    rows = db_rows(
        env,
        "SELECT a.task_id, substr(r.logical_date, 1, 10), count(*) FROM task_attempt a "
        "JOIN dag_run r ON r.id = a.run_pk GROUP BY 1, 2",
    )
    return {(task_id, day): n for task_id, day, n in rows}


def task_states(env: dict[str, str], day: str) -> dict[str, str]:
    run = cli_json("runs", "show", "chain", "--date", day, env=env)
    return {t["task_id"]: t["state"] for t in run["tasks"]}


def assert_usage_error(result: subprocess.CompletedProcess, *words: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.lower().startswith("error")]
    assert len(lines) == 1, result.stderr
    for word in words:
        assert word in lines[0]


# ---------------------------------------------------------------- run


def test_run_with_a_key_runs_once(chain):
    first = ok("run", "chain", "--date", DAYS[1], "--run-id", "fix-42", env=chain)
    assert "run fix-42: success" in first.stdout
    (run,) = cli_json("runs", "list", "chain", env=chain)
    assert run["run_id"] == "fix-42"
    assert run["run_type"] == "manual"
    assert run["state"] == "success"
    assert run["logical_date"] == f"{DAYS[1]}T00:00:00+00:00"
    before = table_counts(chain)
    assert before["task_attempt"] == 4

    again = ok("run", "chain", "--date", DAYS[1], "--run-id", "fix-42", env=chain)
    assert "fix-42 already exists (success); nothing to do" in again.stdout
    assert "run fix-42: success" in again.stdout  # and reports the run
    assert table_counts(chain) == before


def test_run_without_a_date_runs_now(chain):
    started = datetime.now(UTC)
    done = ok("run", "chain", env=chain)
    (run,) = cli_json("runs", "list", "chain", env=chain)
    assert run["run_type"] == "manual" and run["state"] == "success"
    assert run["run_id"] in done.stdout
    logical = datetime.fromisoformat(run["logical_date"])
    assert started - timedelta(seconds=2) <= logical <= datetime.now(UTC)


def test_a_failing_run_exits_1_and_shows_the_error(cli_env, dags_dir):
    write_chain(dags_dir, fail_on=DAYS[0])
    failed = dagrun("run", "chain", "--date", DAYS[0], env=cli_env)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "failed" in failed.stdout.splitlines()[0]
    assert f"RuntimeError: b cannot handle {DAYS[0]}" in failed.stdout
    assert task_states(cli_env, DAYS[0]) == {
        "a": "success",
        "b": "failed",
        "c": "upstream_failed",
        "d": "success",
    }


def test_a_manual_run_on_a_date_that_has_a_run_is_a_run_of_its_own_made_once(chain):
    """Manual runs are unique by run id (DESIGN 6.2): a date with a backfill run gets a
    manual run beside it, and the same command again makes nothing."""
    ok("backfill", "chain", "--start", DAYS[0], "--end", DAYS[0], env=chain)
    ok("run", "chain", "--date", DAYS[0], env=chain)
    before = table_counts(chain)
    again = ok("run", "chain", "--date", DAYS[0], env=chain)
    assert "nothing to do" in again.stdout
    assert table_counts(chain) == before
    kinds = sorted(k for (k,) in db_rows(chain, "SELECT run_type FROM dag_run"))
    assert kinds == ["backfill", "manual"]


def test_a_run_whose_past_failed_ends_and_says_why(cli_env, dags_dir):
    write_chain(dags_dir, fail_on=DAYS[1], depends_on_past=True)
    assert dagrun("backfill", "chain", "--start", DAYS[0], "--end", DAYS[1], env=cli_env).returncode
    waiting = dagrun("run", "chain", "--date", DAYS[2], env=cli_env)  # must not wait forever
    assert waiting.returncode == 1, waiting.stdout + waiting.stderr
    assert f"b (depends_on_past) wait for a previous run that did not succeed: {DAYS[2]}" in (
        waiting.stderr
    )
    assert attempt_counts(cli_env).get(("b", DAYS[2])) is None


# ---------------------------------------------------------------- clear


@pytest.mark.slow
def test_clear_resets_the_chosen_tasks_and_backfill_runs_them_again(chain):
    ok("backfill", "chain", *RANGE, env=chain)
    cleared = ok(
        "clear", "chain", "--start", DAYS[0], "--end", DAYS[1], "--tasks", "^b$", "--downstream",
        "--yes", env=chain,
    )  # fmt: skip
    assert "cleared 4 task instance(s) in 2 run(s)" in cleared.stdout
    for day in DAYS[:2]:
        assert task_states(chain, day) == {"a": "success", "b": "none", "c": "none", "d": "success"}
    assert set(task_states(chain, DAYS[2]).values()) == {"success"}
    (audit,) = db_rows(chain, "SELECT dag_id, detail FROM audit_log WHERE action = 'clear'")
    assert audit[0] == "chain"
    detail = json.loads(audit[1])
    assert (detail["pattern"], detail["downstream"], detail["tasks"]) == ("^b$", True, 4)

    again = ok("backfill", "chain", *RANGE, env=chain)
    assert "runs 2 succeeded, 0 failed" in again.stdout
    counts = attempt_counts(chain)
    assert {k for k, n in counts.items() if n == 2} == {(t, d) for t in "bc" for d in DAYS[:2]}
    assert {n for k, n in counts.items() if k[0] in "ad" or k[1] == DAYS[2]} == {1}


@pytest.mark.slow
def test_clear_without_yes_asks_and_no_changes_nothing(chain):
    ok("backfill", "chain", *RANGE, env=chain)
    before = table_counts(chain)
    states = {day: task_states(chain, day) for day in DAYS}
    declined = dagrun("clear", "chain", *RANGE, env=chain, input="n\n")
    assert declined.returncode != 0
    assert "clear 12 task instance(s) in 3 run(s) of chain?" in declined.stdout
    assert table_counts(chain) == before
    assert {day: task_states(chain, day) for day in DAYS} == states

    accepted = dagrun("clear", "chain", *RANGE, "--tasks", "^d$", env=chain, input="y\n")
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    assert "cleared 3 task instance(s) in 3 run(s)" in accepted.stdout
    assert {task_states(chain, day)["d"] for day in DAYS} == {"none"}


@pytest.mark.slow
def test_clear_failed_only_touches_the_failures(cli_env, dags_dir):
    write_chain(dags_dir, fail_on=DAYS[1])
    assert dagrun("backfill", "chain", *RANGE, env=cli_env).returncode == 1
    write_chain(dags_dir, fail_on=None)
    cleared = ok("clear", "chain", *RANGE, "--failed-only", "--yes", env=cli_env)
    assert "cleared 2 task instance(s) in 1 run(s)" in cleared.stdout
    assert task_states(cli_env, DAYS[1]) == {
        "a": "success",
        "b": "none",
        "c": "none",
        "d": "success",
    }

    ok("backfill", "chain", *RANGE, env=cli_env)
    counts = attempt_counts(cli_env)
    assert counts.pop(("b", DAYS[1])) == 2
    assert set(counts.values()) == {1}
    assert len(counts) == 4 * 3 - 1  # c of DAYS[1] ran once, after the clear


SCOPED = """
from dagrun import DAG, BashTask

with DAG("scoped", schedule="@daily", start_date="2026-01-01"):
    make = BashTask("make", command="echo make").as_setup()
    work = BashTask("work", command="echo work")
    drop = BashTask("drop", command="echo drop").as_teardown(setups=make)
    make >> work >> BashTask("report", command="echo report") >> drop
    drop >> BashTask("after", command="echo after")
"""


@pytest.mark.slow
def test_clearing_work_clears_its_setup_and_teardown_and_backfill_runs_them_again(
    cli_env, dags_dir
):
    write_dag(dags_dir, "scoped.py", SCOPED)
    day = ("--start", DAYS[0], "--end", DAYS[0])
    ok("backfill", "scoped", *day, env=cli_env)
    asked = dagrun("clear", "scoped", *day, "--tasks", "^report$", env=cli_env, input="n\n")
    assert "clear 3 task instance(s) in 1 run(s) of scoped?" in asked.stdout  # with make, drop
    cleared = ok("clear", "scoped", *day, "--tasks", "^(report|after)$", "--yes", env=cli_env)
    assert "cleared 4 task instance(s) in 1 run(s)" in cleared.stdout
    run = cli_json("runs", "show", "scoped", "--date", DAYS[0], env=cli_env)
    assert {t["task_id"]: t["state"] for t in run["tasks"]} == {
        "make": "none",
        "work": "success",  # between make and report, but not cleared: it keeps its state
        "report": "none",
        "drop": "none",
        "after": "none",  # after the teardown: out of make's scope, cleared on its own
    }
    ok("backfill", "scoped", *day, env=cli_env)
    tries = {task_id: n for (task_id, _), n in attempt_counts(cli_env).items()}
    assert tries == {"make": 2, "work": 1, "report": 2, "drop": 2, "after": 2}


@pytest.mark.parametrize(
    ("pattern", "words"),
    [("^nope$", ["matches no task"]), ("(", ["bad --tasks regex"])],
)
def test_clear_with_a_bad_pattern_exits_2(chain, pattern, words):
    ok("backfill", "chain", "--start", DAYS[0], "--end", DAYS[0], env=chain)
    before = table_counts(chain)
    result = dagrun("clear", "chain", *RANGE, "--tasks", pattern, "--yes", env=chain)
    assert_usage_error(result, *words)
    assert table_counts(chain) == before


# ---------------------------------------------------------------- runs list | show


@pytest.mark.slow
def test_runs_list_and_show_json(cli_env, dags_dir):
    write_chain(dags_dir, fail_on=DAYS[1])
    assert dagrun("backfill", "chain", *RANGE, env=cli_env).returncode == 1
    ok("run", "chain", "--date", "2026-01-05", "--run-id", "by-hand", env=cli_env)

    runs = cli_json("runs", "list", "chain", env=cli_env)
    assert all({"run_id", "logical_date", "state", "run_type"} <= set(r) for r in runs)
    assert [r["logical_date"][:10] for r in runs] == [*DAYS, "2026-01-05"]
    assert [r["state"] for r in runs] == ["success", "failed", "success", "success"]
    assert [r["run_type"] for r in runs] == ["backfill"] * 3 + ["manual"]
    assert runs[-1]["run_id"] == "by-hand"
    failed = cli_json("runs", "list", "chain", "--state", "failed", env=cli_env)
    assert [r["run_id"] for r in failed] == [runs[1]["run_id"]]
    table = ok("runs", "list", "chain", env=cli_env).stdout.splitlines()
    assert len(table) == 1 + 4 and "by-hand" in table[-1] and "manual" in table[-1]

    shown = cli_json("runs", "show", "chain", "--date", DAYS[1], env=cli_env)
    assert shown["run_id"] == runs[1]["run_id"]
    assert shown["logical_date"] == f"{DAYS[1]}T00:00:00+00:00"
    assert shown["state"] == "failed"
    tasks = {t["task_id"]: (t["state"], t["try_number"]) for t in shown["tasks"]}
    assert tasks == {
        "a": ("success", 1),
        "b": ("failed", 1),
        "c": ("upstream_failed", 0),
        "d": ("success", 1),
    }
    by_id = cli_json("runs", "show", "chain", "by-hand", env=cli_env)
    assert by_id["logical_date"] == "2026-01-05T00:00:00+00:00"
    assert_usage_error(dagrun("runs", "show", "chain", "--date", "2026-02-01", env=cli_env))


# ---------------------------------------------------------------- logs


@pytest.mark.slow
def test_logs_print_the_latest_attempt_or_the_chosen_one(cli_env, dags_dir):
    write_dag(dags_dir, "retrying.py", RETRYING)
    ok("backfill", "retrying", "--start", DAYS[0], "--end", DAYS[0], env=cli_env)
    latest = ok("logs", "retrying", "shaky", DAYS[0], env=cli_env)
    assert f"shaky try 2 for {DAYS[0]}" in latest.stdout
    assert "try 1" not in latest.stdout
    first = ok("logs", "retrying", "shaky", DAYS[0], "--try", "1", env=cli_env)
    assert f"shaky try 1 for {DAYS[0]}" in first.stdout
    assert "RuntimeError: the first try always fails" in first.stdout
    assert "try 2" not in first.stdout
    assert_usage_error(dagrun("logs", "retrying", "shaky", DAYS[0], "--try", "3", env=cli_env))
    assert_usage_error(dagrun("logs", "retrying", "nope", DAYS[0], env=cli_env), "nope")
    assert_usage_error(dagrun("logs", "retrying", "shaky", DAYS[1], env=cli_env), "no run")


# ---------------------------------------------------------------- test | tasks test


@pytest.mark.slow
def test_dag_test_runs_in_process_and_records_nothing(cli_env, dags_dir):
    write_chain(dags_dir, fail_on=DAYS[1])
    ok("dags", "list", env=cli_env)  # the DAG rows exist; test itself must add nothing
    before = table_counts(cli_env)

    passed = ok("test", "chain", DAYS[0], env=cli_env)
    assert f"a ran for {DAYS[0]} (try 1, parent {os.getpid()})" in passed.stdout
    assert f"c got {DAYS[0]}" in passed.stdout  # values pass between tasks
    assert f"d ran for {DAYS[0]}" in passed.stdout

    failed = dagrun("test", "chain", DAYS[1], env=cli_env)
    assert failed.returncode == 1
    assert f"b cannot handle {DAYS[1]}" in failed.stdout + failed.stderr
    states = dict(line.split()[:2] for line in failed.stdout.splitlines()[-4:])
    assert states == {"a": "success", "b": "failed", "c": "upstream_failed", "d": "success"}
    assert table_counts(cli_env) == before
    assert not (Path(cli_env["DAGRUN_HOME"]) / "logs").exists()


@pytest.mark.slow
def test_tasks_test_runs_one_task_in_process_and_records_nothing(cli_env, dags_dir):
    write_chain(dags_dir, fail_on=DAYS[1])
    ok("dags", "list", env=cli_env)
    before = table_counts(cli_env)

    passed = ok("tasks", "test", "chain", "b", DAYS[0], env=cli_env)
    assert f"b ran for {DAYS[0]}" in passed.stdout
    assert "a ran" not in passed.stdout
    failed = dagrun("tasks", "test", "chain", "b", DAYS[1], env=cli_env)
    assert failed.returncode == 1
    assert f"RuntimeError: b cannot handle {DAYS[1]}" in failed.stderr
    assert_usage_error(dagrun("tasks", "test", "chain", "nope", DAYS[0], env=cli_env), "nope")
    assert table_counts(cli_env) == before

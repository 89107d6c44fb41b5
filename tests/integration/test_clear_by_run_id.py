"""``dagrun clear --run-id``: a manual run is cleared by its key, as other commands pick a
run, without working out its logical date."""

from __future__ import annotations

import pytest

from tests.helpers import db_rows, run_cli, write_dag

# ``flaky`` fails while the flag file exists.
MANUAL = """
import os
from dagrun import DAG, task

with DAG("manual", schedule=None, default_args={{"retries": 0}}):

    @task
    def flaky():
        if os.path.exists({flag!r}):
            raise RuntimeError("the flag is set")

    @task
    def after():
        print("after ran")

    flaky() >> after()
"""


def states(env: dict[str, str]) -> dict[tuple[str, str], str]:
    rows = db_rows(
        env,
        "SELECT r.run_id, t.task_id, t.state FROM task_instance t "
        "JOIN dag_run r ON r.id = t.run_pk",
    )
    return {(run_id, task_id): state for run_id, task_id, state in rows}


@pytest.mark.slow
def test_clear_by_run_id_clears_that_run_only(cli_env, dags_dir, tmp_path):
    flag = tmp_path / "flag"
    flag.touch()
    write_dag(dags_dir, "manual.py", MANUAL.format(flag=str(flag)))
    for key in ("by-hand", "other"):
        failed = run_cli("run", "manual", "--run-id", key, env=cli_env)
        assert failed.returncode == 1, failed.stdout + failed.stderr
    before = states(cli_env)
    assert before[("by-hand", "flaky")] == before[("other", "flaky")] == "failed"

    cleared = run_cli("clear", "manual", "--run-id", "by-hand", "--yes", env=cli_env)
    assert cleared.returncode == 0, cleared.stdout + cleared.stderr
    assert "cleared 2 task instance(s) in 1 run(s)" in cleared.stdout
    assert "`dagrun run manual --run-id by-hand`" in cleared.stdout
    after = states(cli_env)
    assert after[("by-hand", "flaky")] == after[("by-hand", "after")] == "none"
    assert {k: v for k, v in after.items() if k[0] == "other"} == {
        k: v for k, v in before.items() if k[0] == "other"
    }
    [(detail,)] = db_rows(cli_env, "SELECT run_id FROM audit_log WHERE action = 'clear'")
    assert detail == "by-hand"

    flag.unlink()
    again = run_cli("run", "manual", "--run-id", "by-hand", env=cli_env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert states(cli_env)[("by-hand", "after")] == "success"


@pytest.mark.parametrize(
    "args",
    [
        (),
        ("--start", "2026-01-01"),
        ("--end", "2026-01-01", "--run-id", "r"),
        ("--start", "2026-01-01", "--end", "2026-01-02", "--run-id", "r"),
    ],
    ids=["neither", "start-alone", "end-and-run-id", "both"],
)
def test_clear_takes_dates_or_a_run_id_never_both(cli_env, args):
    failed = run_cli("clear", "manual", *args, "--yes", env=cli_env)
    assert failed.returncode == 2
    assert failed.stderr == "error: give either --start and --end, or --run-id\n"


@pytest.mark.slow
def test_clear_of_an_unknown_run_id_is_one_line_naming_it(cli_env, dags_dir, tmp_path):
    write_dag(dags_dir, "manual.py", MANUAL.format(flag=str(tmp_path / "flag")))
    failed = run_cli("clear", "manual", "--run-id", "nope", "--yes", env=cli_env)
    assert failed.returncode == 2
    assert failed.stderr.startswith("error: DAG 'manual' has no run with run id 'nope'")
    assert len(failed.stderr.splitlines()) == 1

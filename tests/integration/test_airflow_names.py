"""Airflow's command names give dagrun's answers: each alias beside its dagrun command, the
"did you mean" that knows both, and a --help that lists them without loading a command."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import run_cli, write_dag

pytestmark = pytest.mark.slow

TWO_TASKS = """
    from dagrun import DAG, BashTask

    with DAG("d", schedule="@daily", start_date="2026-01-01"):
        BashTask("a", command="echo a") >> BashTask("b", command="exit 1")
"""


@pytest.fixture
def ran(cli_env, dags_dir):
    write_dag(dags_dir, "d.py", TWO_TASKS)
    assert run_cli("run", "d", "--date", "2026-01-02", env=cli_env).returncode == 1
    return cli_env


@pytest.mark.parametrize(
    ("airflow", "dagrun"),
    [
        ("dags list-runs d", "runs list d"),
        ("dags state d 2026-01-02", "runs state d --date 2026-01-02"),
        ("tasks state d b 2026-01-02", "tasks state d b --date 2026-01-02"),
        ("tasks list d", "dags show d"),
        ("db migrate", "db init"),
        ("version", "--version"),
        ("dags test d 2026-01-03", "test d 2026-01-03"),
        ("dags trigger d --run-id from-airflow", "runs show d from-airflow"),
    ],
)
def test_an_airflow_name_answers_as_its_dagrun_command(ran, airflow, dagrun):
    first = run_cli(*airflow.split(), env=ran)
    second = run_cli(*dagrun.split(), env=ran)
    if airflow.startswith("dags trigger"):  # the trigger made a run that dagrun's show finds
        assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
        return
    assert (first.returncode, first.stdout) == (second.returncode, second.stdout)
    assert first.stdout.strip()


def test_runs_and_tasks_state_print_the_state(ran):
    assert run_cli("runs", "state", "d", "--date", "2026-01-02", env=ran).stdout == "failed\n"
    assert (
        run_cli("tasks", "state", "d", "a", "--date", "2026-01-02", env=ran).stdout == "success\n"
    )


@pytest.mark.parametrize(
    ("typed", "hint"),
    [
        ("dags list-run d", "error: no such command 'dags list-run' (did you mean 'list-runs'?)"),
        ("dags triger d", "error: no such command 'dags triger' (did you mean 'trigger'?)"),
        ("runz", "error: no such command 'runz' (did you mean 'run'?) (see `dagrun --help`)"),
    ],
)
def test_a_mistyped_name_is_answered_with_the_nearest(cli_env, typed, hint):
    done = run_cli(*typed.split(), env=cli_env)
    assert done.returncode == 2
    assert done.stderr.startswith(hint)


def test_help_lists_airflow_names_and_loads_no_command():
    code = (
        "import sys\n"
        "from dagrun.cli import cli\n"
        "try:\n"
        "    cli.main(['--help'], standalone_mode=False)\n"
        "finally:\n"
        "    loaded = [m for m in sys.modules if m.startswith(('dagrun.cli.', 'sqlalchemy'))]\n"
        "    print('LOADED', sorted(loaded))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "Airflow's command names" in done.stdout
    assert "dags list-runs  = dagrun runs list DAG" in done.stdout
    loaded = done.stdout.split("LOADED ")[1]
    assert "sqlalchemy" not in loaded and "dagrun.cli.dags" not in loaded
    assert "``" not in done.stdout


def test_completion_offers_dag_task_and_run_ids(ran):
    def complete(words: str, index: int) -> str:
        env = {
            **ran,
            "_DAGRUN_COMPLETE": "bash_complete",
            "COMP_WORDS": words,
            "COMP_CWORD": str(index),
        }
        return subprocess.run(
            [sys.executable, "-m", "dagrun"],
            env={**__import__("os").environ, **env},
            capture_output=True,
            text=True,
            check=True,
        ).stdout

    assert complete("dagrun runs list ", 3).split() == ["plain,d"]
    assert complete("dagrun tasks state d ", 4).split() == ["plain,a", "plain,b"]
    assert "manual__2026-01-02" in complete("dagrun runs show d ", 4)

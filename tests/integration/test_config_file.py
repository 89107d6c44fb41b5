"""dagrun.toml as a user writes it: found from the project folder, shown by `config list`
with where each value came from, and a bad key or value stopping every command in one line."""

from __future__ import annotations

import json

import pytest

from tests.helpers import run_cli, write_dag

pytestmark = pytest.mark.slow

ONE_TASK = """
    from dagrun import DAG, BashTask

    with DAG("{dag_id}", schedule=None):
        BashTask("t", command="echo")
"""


def project_env(cli_env: dict[str, str]) -> dict[str, str]:
    """The CLI environment without the variables a config file should be able to set."""
    return {k: v for k, v in cli_env.items() if k not in ("DAGRUN_DAGS_FOLDER",)}


def test_the_file_of_the_nearest_parent_sets_the_dags_folder(cli_env, tmp_path):
    project = tmp_path / "project"
    write_dag(project / "pipelines", "a.py", ONE_TASK.format(dag_id="from_file"))
    (project / "dagrun.toml").write_text(f'[core]\ndags_folder = "{project / "pipelines"}"\n')
    (project / "sub").mkdir()
    env = project_env(cli_env)

    listed = run_cli("dags", "list", "--json", env=env, cwd=project / "sub")
    shown = run_cli("config", "list", "--json", env=env, cwd=project / "sub")

    assert [d["dag_id"] for d in json.loads(listed.stdout)] == ["from_file"]
    found = {s["name"]: s for s in json.loads(shown.stdout)}
    assert found["core.dags_folder"]["source"] == f"file {project / 'dagrun.toml'}:2"


def test_flag_over_env_over_file(cli_env, tmp_path):
    (tmp_path / "dagrun.toml").write_text("[core]\nparse_timeout = 5\n")
    env = {**project_env(cli_env), "DAGRUN_PARSE_TIMEOUT": "7"}
    shown = json.loads(run_cli("config", "list", "--json", env=env, cwd=tmp_path).stdout)
    found = {s["name"]: s for s in shown}
    assert (found["core.parse_timeout"]["value"], found["core.parse_timeout"]["source"]) == (
        "7.0",
        "env DAGRUN_PARSE_TIMEOUT",
    )
    flagged = run_cli(
        "--db",
        "sqlite:///" + str(tmp_path / "x.db"),
        "config",
        "get",
        "core.db_url",
        env=env,
        cwd=tmp_path,
    )
    assert flagged.stdout.strip() == "sqlite:///" + str(tmp_path / "x.db")


def test_a_bad_file_stops_every_command_in_one_line(cli_env, tmp_path):
    (tmp_path / "dagrun.toml").write_text("[worker]\n\nlease_secs = 10\n")
    env = project_env(cli_env)
    for args in (("dags", "list"), ("runs", "list", "x"), ("config", "list"), ("db", "check")):
        done = run_cli(*args, env=env, cwd=tmp_path)
        assert done.returncode == 2, args
        assert done.stderr == (
            f"error: {tmp_path / 'dagrun.toml'}:3: worker.lease_secs: unknown setting "
            "(did you mean worker.lease_seconds?)\n"
        )


def test_config_names_a_file_and_init_writes_one(cli_env, tmp_path):
    env = project_env(cli_env)
    assert run_cli("init", env=env, cwd=tmp_path).returncode == 0
    assert (tmp_path / "dags").is_dir()
    again = run_cli("init", env=env, cwd=tmp_path)
    assert again.returncode == 2 and "exists: pass --force" in again.stderr
    named = tmp_path / "elsewhere.toml"
    named.write_text('[logging]\nformat = "json"\n')
    got = run_cli("--config", str(named), "config", "get", "logging.format", env=env, cwd=tmp_path)
    assert got.stdout == "json\n"
    masked = run_cli("--db", "postgresql://u:pw@h/db", "config", "get", "core.db_url", env=env)
    assert masked.stdout == "postgresql://u:***@h/db\n"

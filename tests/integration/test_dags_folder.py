"""The store owns its dags folder: commands run from elsewhere read it and never change it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import cli_json, db_rows, run_cli, write_dag

ONE_TASK = """
    from dagrun import DAG, BashTask

    with DAG("{dag_id}", schedule="@daily", start_date="2026-01-01"):
        BashTask("t", command="echo hi")
"""


@pytest.fixture
def bound_env(cli_env, dags_dir: Path) -> dict[str, str]:
    """A store that serves ``dags_dir`` (one DAG, one run), and no DAGRUN_DAGS_FOLDER: a
    command's folder is then ./dags of wherever it runs, as for a user."""
    write_dag(dags_dir, "sales.py", ONE_TASK.format(dag_id="sales"))
    env = {k: v for k, v in cli_env.items() if k != "DAGRUN_DAGS_FOLDER"}
    done = run_cli("run", "sales", "--date", "2026-01-02", env=env, cwd=dags_dir.parent)
    assert done.returncode == 0, done.stderr
    return env


def test_a_command_from_another_directory_reads_the_store_folder(bound_env, dags_dir, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    done = run_cli("runs", "list", "sales", env=bound_env, cwd=elsewhere)

    assert done.returncode == 0, done.stderr
    assert "2026-01-02" in done.stdout
    assert done.stderr.count(f"this store serves the DAGs of {dags_dir}") == 1


def test_an_empty_dags_folder_removes_nothing(bound_env, dags_dir, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()

    listed = cli_json("--dags-folder", str(empty), "dags", "list", env=bound_env)

    assert [d["dag_id"] for d in listed] == ["sales"]
    assert db_rows(bound_env, "SELECT dag_id, is_active FROM dag") == [("sales", 1)]


def test_an_unknown_dag_names_the_store_folder(bound_env, dags_dir, tmp_path):
    other = tmp_path / "other" / "dags"
    write_dag(other, "other.py", ONE_TASK.format(dag_id="other"))

    done = run_cli("runs", "list", "other", env=bound_env, cwd=other.parent)

    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        f"error: unknown DAG 'other' in {dags_dir}, the dags folder this store serves "
        "(see `dagrun dags list`)"
    )


def test_rebind_folder_moves_the_store(bound_env, dags_dir, tmp_path):
    other = tmp_path / "other" / "dags"
    write_dag(other, "other.py", ONE_TASK.format(dag_id="other"))

    done = run_cli("db", "rebind-folder", str(other), env=bound_env)

    assert done.returncode == 0, done.stderr
    assert f"this store now serves {other}" in done.stdout
    listed = cli_json("dags", "list", env=bound_env, cwd=tmp_path)
    assert [d["dag_id"] for d in listed] == ["other"]
    audit = cli_json("audit", env=bound_env)
    assert audit[0]["action"] == "rebind_folder"
    assert db_rows(bound_env, "SELECT count(*) FROM dag_run WHERE dag_id = 'sales'") == [(1,)]


def test_rebind_to_a_missing_folder_is_one_line(bound_env, tmp_path):
    done = run_cli("db", "rebind-folder", str(tmp_path / "nope"), env=bound_env)
    assert done.returncode == 2
    assert (
        done.stderr
        == f"error: no folder {tmp_path / 'nope'}: give the dags folder the store should serve\n"
    )

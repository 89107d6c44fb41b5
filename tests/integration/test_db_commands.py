"""``dagrun db check``, ``db backup`` and ``db clean --before`` as a user runs them, and what
every command says of a database that is damaged, locked, another program's, newer, or in
a folder that does not exist: one line, with what to do."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.helpers import cli_json, run_cli, write_dag

TOKYO = """
from dagrun import DAG, task

with DAG("tokyo", schedule="@daily", start_date="2026-01-01", timezone="Asia/Tokyo",
         catchup=False):

    @task
    def work(ds):
        print(ds)

    work()
"""


def one_line(result, code: int = 1) -> str:
    """The single ``error: ...`` line of a failed command."""
    assert result.returncode == code, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def backfill(env: dict[str, str], start: str = "2026-01-04", end: str = "2026-01-06") -> None:
    result = run_cli("backfill", "tokyo", "--start", start, "--end", end, env=env)
    assert result.returncode == 0, result.stdout + result.stderr


def database(env: dict[str, str]) -> Path:
    return Path(env["DAGRUN_DB_URL"].removeprefix("sqlite:///"))


@pytest.mark.slow
def test_clean_before_a_date_counts_from_midnight_in_the_dags_timezone(cli_env, dags_dir):
    write_dag(dags_dir, "tokyo.py", TOKYO)
    backfill(cli_env)
    result = run_cli("db", "clean", "--before", "2026-01-06", "--yes", env=cli_env)
    assert result.returncode == 0, result.stderr
    assert "before 2026-01-06 00:00 in each DAG's timezone" in result.stdout
    listed = cli_json("runs", "list", "tokyo", env=cli_env)
    assert [r["logical_date"] for r in listed] == ["2026-01-05T15:00:00+00:00"]  # the 6th
    helped = run_cli("db", "clean", "--help", env=cli_env)
    assert "each DAG's timezone" in helped.stdout


@pytest.mark.slow
def test_check_names_damage_and_backup_copies_a_sound_store(cli_env, dags_dir, tmp_path):
    write_dag(dags_dir, "tokyo.py", TOKYO)
    backfill(cli_env)
    check = run_cli("db", "check", env=cli_env)
    assert check.returncode == 0, check.stderr
    assert check.stdout.startswith(f"ok: {database(cli_env)}, schema version ")

    copy = tmp_path / "copy.db"
    made = run_cli("db", "backup", str(copy), env=cli_env)
    assert made.returncode == 0, made.stderr
    assert f"to {copy}: " in made.stdout and " pages in " in made.stdout
    again = one_line(run_cli("db", "backup", str(copy), env=cli_env), code=2)
    assert "exists: pass --overwrite" in again
    assert run_cli("db", "backup", str(copy), "--overwrite", env=cli_env).returncode == 0

    db = sqlite3.connect(database(cli_env))
    db.execute("UPDATE dag_run SET conf = CAST(x'7b22ff7d' AS TEXT) WHERE id = 2")
    db.commit()
    db.close()
    check = run_cli("db", "check", env=cli_env)
    assert check.stdout.splitlines() == [
        "damaged: table dag_run, row 2: column 'conf' holds text that is not UTF-8"
    ]
    assert "is damaged (1 problem(s) above)" in one_line(check)
    for command in (("runs", "list", "tokyo"), ("runs", "show", "tokyo", "--date", "2026-01-05")):
        line = one_line(run_cli(*command, env=cli_env))
        assert "is damaged (column 'conf' holds text that is not UTF-8)" in line
        assert "`dagrun db check`" in line and "`dagrun db backup`" in line

    restored = cli_env | {"DAGRUN_DB_URL": f"sqlite:///{copy}"}
    assert len(cli_json("runs", "list", "tokyo", env=restored)) == 3


def test_postgresql_is_backed_up_with_pg_dump(cli_env, pg_url, tmp_path):
    env = cli_env | {"DAGRUN_DB_URL": pg_url}
    assert "pg_dump" in one_line(run_cli("db", "backup", str(tmp_path / "x.db"), env=env), 2)


def test_a_folder_that_does_not_exist_is_not_made(cli_env, tmp_path):
    url = f"sqlite:///{tmp_path / 'no' / 'such' / 'x.db'}"
    line = one_line(run_cli("--db", url, "dags", "list", env=cli_env), code=2)
    assert line == (
        f"error: --db {url}: the folder {tmp_path / 'no' / 'such'} does not exist; "
        "create it first, or correct the path"
    )
    assert not (tmp_path / "no").exists()


@pytest.mark.slow
def test_another_programs_file_and_a_file_that_is_not_sqlite_are_left_alone(cli_env, tmp_path):
    other = tmp_path / "notes.db"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE notes (x)")
    db.close()
    text = tmp_path / "notes.txt"
    text.write_text("milk, " * 100)
    for path, why in ((other, "holds another program's tables (notes)"), (text, "is not a SQLite")):
        before = path.read_bytes()
        for command in (("dags", "list"), ("db", "init"), ("db", "check")):
            line = one_line(run_cli("--db", f"sqlite:///{path}", *command, env=cli_env))
            assert line.startswith(f"error: {path} {why}"), line
        assert path.read_bytes() == before


@pytest.mark.slow
def test_a_held_lock_is_one_line(cli_env, dags_dir):
    write_dag(dags_dir, "tokyo.py", TOKYO)
    assert run_cli("dags", "list", env=cli_env).returncode == 0
    holder = sqlite3.connect(database(cli_env), isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        env = cli_env | {"DAGRUN_SQLITE_BUSY_SECONDS": "0.3"}
        line = one_line(run_cli("trigger", "tokyo", env=env))
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert f"the database {database(cli_env)} is locked" in line
    assert "try again once that process is done" in line


@pytest.mark.slow
def test_a_newer_schema_is_one_line_for_every_command(cli_env, dags_dir):
    write_dag(dags_dir, "tokyo.py", TOKYO)
    assert run_cli("db", "init", env=cli_env).returncode == 0
    db = sqlite3.connect(database(cli_env))
    db.execute("UPDATE dagrun_meta SET value = '999' WHERE key = 'schema_version'")
    db.commit()
    db.close()
    for command in (("trigger", "tokyo"), ("runs", "list", "tokyo"), ("db", "check")):
        assert "newer than this dagrun" in one_line(run_cli(*command, env=cli_env))


def test_a_driver_error_the_store_did_not_translate_is_one_line(monkeypatch, capsys):
    from sqlalchemy.exc import IntegrityError

    import dagrun.cli

    def broken_index(**_options) -> None:
        raise IntegrityError("INSERT ...", {}, Exception("UNIQUE constraint failed: dag.dag_id"))

    monkeypatch.setattr(dagrun.cli.cli, "main", broken_index)
    with pytest.raises(SystemExit) as exited:
        dagrun.cli.main(["dags", "list"])
    assert exited.value.code == 1
    assert capsys.readouterr().err == (
        "error: database error: (builtins.Exception) UNIQUE constraint failed: dag.dag_id; "
        "`dagrun db check` checks the database\n"
    )

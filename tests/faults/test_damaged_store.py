"""A real SQLite store damaged between two commands: garbage written over the b-tree pages
of its run, task and audit tables. Every command that reads them says so in one line (exit
1, no traceback) with what to do, and ``db check`` names the damage."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.helpers import overwrite_root_page, run_cli, write_dag

pytestmark = pytest.mark.slow

DAILY = """
from dagrun import DAG, task

with DAG("daily", schedule="@daily", start_date="2026-01-01", catchup=False):

    @task
    def extract(ds):
        return ds

    @task
    def load(value):
        print(value)

    load(extract())
"""
#: The tables whose root page gets garbage over its b-tree header.
DAMAGED = ("dag_run", "task_instance", "task_attempt", "audit_log")
COMMANDS = [
    ("backfill", "daily", "--start", "2026-01-01", "--end", "2026-01-08"),
    ("trigger", "daily"),
    ("run", "daily", "--date", "2026-01-20"),
    ("clear", "daily", "--start", "2026-01-01", "--end", "2026-01-03", "--yes"),
    ("audit",),
    ("db", "clean", "--before", "2026-01-03", "--yes"),
    ("runs", "list", "daily"),
    ("runs", "show", "daily", "--date", "2026-01-02"),
]


def damage(path: Path) -> None:
    """Garbage over the header of the root page of ``DAMAGED``'s tables: every statement
    that reads or writes one of them starts there."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    for table in DAMAGED:
        overwrite_root_page(path, table, b"\x37" * 12)


def test_every_command_on_a_store_damaged_between_commands_is_one_line(cli_env, dags_dir):
    write_dag(dags_dir, "daily.py", DAILY)
    made = run_cli("backfill", "daily", "--start", "2026-01-01", "--end", "2026-01-05", env=cli_env)
    assert made.returncode == 0, made.stdout + made.stderr
    path = Path(cli_env["DAGRUN_DB_URL"].removeprefix("sqlite:///"))
    damage(path)
    for command in COMMANDS:
        result = run_cli(*command, env=cli_env)
        said = f"{command}: {result.stdout}{result.stderr}"
        assert result.returncode == 1, said
        assert "Traceback" not in result.stderr, said
        lines = result.stderr.strip().splitlines()
        assert lines[-1].startswith(f"error: the database {path} is damaged ("), said
        assert len(lines) == 1 or command[0] == "run", said  # run says which run it made
        assert "`dagrun db check`" in lines[-1] and "`dagrun db backup`" in lines[-1], said
    check = run_cli("db", "check", env=cli_env)
    assert check.returncode == 1 and "Traceback" not in check.stderr, check.stderr
    named = check.stdout.splitlines()
    assert named and all(line.startswith("damaged: ") for line in named), check.stdout
    assert any(table in check.stdout for table in DAMAGED), check.stdout
    assert check.stderr.strip().startswith(f"error: the database {path} is damaged")

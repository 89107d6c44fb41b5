"""What a command pays for: once its statements are rendered (``store.rendered``), a
one-task ``dagrun run``, ``dags list`` with nothing changed and ``runs list`` run on
Python's own SQLite driver and never import SQLAlchemy (importing it costs more than the
whole of a one-task run), nor does a command that makes a new store."""

from __future__ import annotations

import os

from tests.helpers import cli_env_in, watched, write_dag

ONE_TASK = """
    from dagrun import DAG, PythonTask

    def hello():
        return "hello"

    with DAG("one", schedule=None):
        PythonTask("hello", python_callable=hello)
"""

#: What a rendered command must not import.
DECLARATIONS = {"sqlalchemy", "dagrun.store.queries", "dagrun.store.statements"}


def loaded_by(args: list[str], env: dict[str, str], cwd) -> list[str]:
    found, _ = watched(args, env, cwd)
    return [m for m in found["loaded"] if m in DECLARATIONS]


def test_rendered_commands_never_import_sqlalchemy(cli_env, dags_dir, tmp_path):
    write_dag(dags_dir, "one.py", ONE_TASK)
    # Bytecode on, as on a user's machine: rendered statements are kept beside it.
    env = {k: v for k, v in {**os.environ, **cli_env}.items() if k != "PYTHONDONTWRITEBYTECODE"}
    commands = [["run", "one"], ["dags", "list"], ["runs", "list", "one"]]
    for args in commands:  # the first of each renders what it runs, and keeps it
        loaded_by(args, env, tmp_path)
    for args in commands:
        assert loaded_by(args, env, tmp_path) == [], args
    elsewhere = cli_env_in(tmp_path / "new")  # a new store: its schema made from rendered DDL
    write_dag(tmp_path / "new" / "dags", "one.py", ONE_TASK)
    fresh = {**env, **elsewhere}
    assert loaded_by(["dags", "list"], fresh, tmp_path / "new") == []
    assert (tmp_path / "new" / "home" / "dagrun.db").exists()

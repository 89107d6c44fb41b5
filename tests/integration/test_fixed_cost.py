"""What a command pays for: once its statements are rendered (``store.rendered``), a
one-task ``dagrun run``, ``dags list`` with nothing changed and ``runs list`` run on
Python's own SQLite driver and never import SQLAlchemy (importing it costs more than the
whole of a one-task run), nor does a command that makes a new store."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.helpers import cli_env_in, write_dag

ONE_TASK = """
    from dagrun import DAG, PythonTask

    def hello():
        return "hello"

    with DAG("one", schedule=None):
        PythonTask("hello", python_callable=hello)
"""

#: Runs a command in this interpreter, as the console script does, and says which of the
#: heavy modules it imported.
IN_PROCESS = """
import json, sys
from dagrun.cli import main
sys.argv = ["dagrun", *sys.argv[1:]]
try:
    main()
except SystemExit as exc:
    code = exc.code
else:
    code = 0
heavy = ("sqlalchemy", "dagrun.store.queries", "dagrun.store.statements")
print(json.dumps({"code": code, "loaded": [m for m in heavy if m in sys.modules]}))
"""


def loaded_by(args: list[str], env: dict[str, str], cwd) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", IN_PROCESS, *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["code"] == 0, done.stderr[-2000:]
    return found["loaded"]


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

"""``dagrun dags list`` with nothing changed since the last sync, as a user runs it: it forks
no parse child, imports neither the parser nor the authoring API, and writes nothing to the
store; what it lists, import errors included, is what the sync that parsed recorded."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.helpers import write_dag

#: Runs a command in this interpreter, as the console script does, and says what it did
#: beside printing: the forks it made, the statements it sent to SQLite that write (a write
#: transaction's ``BEGIN IMMEDIATE`` among them) and which of the modules a parse needs it
#: imported.
WATCHED = """
import json, os, sqlite3, sys

sent, forks = [], []
connect, fork = sqlite3.connect, os.fork


def traced(*args, **kwargs):
    conn = connect(*args, **kwargs)
    conn.set_trace_callback(sent.append)
    return conn


def counted():
    forks.append(1)
    return fork()


sqlite3.connect, os.fork = traced, counted
from dagrun.cli import main

sys.argv = ["dagrun", *sys.argv[1:]]
try:
    main()
except SystemExit as exc:
    code = exc.code
else:
    code = 0
writing = ("BEGIN IMMEDIATE", "INSERT", "UPDATE", "DELETE", "REPLACE", "CREATE", "DROP", "ALTER")
parsing = (
    "dagrun.parsing.parser",
    "dagrun.parsing.loader",
    "dagrun.authoring",
    "dagrun.store.registry",
    "multiprocessing",
    "sqlalchemy",
)
print(json.dumps({
    "code": code,
    "forks": len(forks),
    "writes": [s for s in sent if s.lstrip().upper().startswith(writing)],
    "loaded": [m for m in parsing if m in sys.modules],
}))
"""

GOOD = """
    from dagrun import DAG, BashTask

    with DAG("good", schedule="@daily", start_date="2026-01-01"):
        BashTask("t", command="echo")
"""


def watched(env: dict[str, str], cwd) -> tuple[dict, subprocess.CompletedProcess]:
    done = subprocess.run(
        [sys.executable, "-c", WATCHED, "dags", "list"],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["code"] == 0, done.stderr[-2000:]
    return found, done


def test_dags_list_with_nothing_changed_forks_nothing_imports_no_parser_and_writes_nothing(
    cli_env, dags_dir, tmp_path
):
    write_dag(dags_dir, "good.py", GOOD)
    write_dag(dags_dir, "broken.py", "import no_such_module_here\n")
    env = {k: v for k, v in {**os.environ, **cli_env}.items() if k != "PYTHONDONTWRITEBYTECODE"}
    first, _ = watched(env, tmp_path)  # parses both files into a new store
    assert first["forks"] >= 1 and first["writes"], "the watch sees forks and writes"
    again, done = watched(env, tmp_path)
    assert (again["forks"], again["writes"], again["loaded"]) == (0, [], [])
    assert "good" in done.stdout
    assert "1 DAG file(s) failed to load" in done.stderr

"""``dagrun dags list`` with nothing changed since the last sync, as a user runs it: it forks
no parse child, imports neither the parser nor the authoring API, and writes nothing to the
store; what it lists, import errors included, is what the sync that parsed recorded."""

from __future__ import annotations

import os

from tests.helpers import watched, write_dag

GOOD = """
    from dagrun import DAG, BashTask

    with DAG("good", schedule="@daily", start_date="2026-01-01"):
        BashTask("t", command="echo")
"""


def test_dags_list_with_nothing_changed_forks_nothing_imports_no_parser_and_writes_nothing(
    cli_env, dags_dir, tmp_path
):
    write_dag(dags_dir, "good.py", GOOD)
    write_dag(dags_dir, "broken.py", "import no_such_module_here\n")
    env = {k: v for k, v in {**os.environ, **cli_env}.items() if k != "PYTHONDONTWRITEBYTECODE"}
    first, _ = watched(["dags", "list"], env, tmp_path)  # parses both files into a new store
    assert first["forks"] >= 1 and first["writes"], "the watch sees forks and writes"
    again, done = watched(["dags", "list"], env, tmp_path)
    assert (again["forks"], again["writes"], again["loaded"]) == (0, [], [])
    assert "good" in done.stdout
    assert "1 DAG file(s) failed to load" in done.stderr

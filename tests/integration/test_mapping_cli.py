"""Mapped tasks from the command line: `runs show` lists each index, `logs`, `clear` and
`tasks mark` pick one with --map-index, and a mapped task without one is a clear error."""

from __future__ import annotations

import json

import pytest

from tests.authoring.test_mapping import FAILING_INDEX
from tests.helpers import db_rows, run_cli, write_dag


def tries(env) -> dict[tuple[str, int], tuple[str, int]]:
    rows = db_rows(env, "SELECT task_id, map_index, state, try_number FROM task_instance")
    return {(t, i): (s, n) for t, i, s, n in rows}


@pytest.mark.slow
def test_mapped_instances_are_shown_picked_cleared_and_marked(cli_env, dags_dir, tmp_path):
    fixed = tmp_path / "fixed"
    write_dag(dags_dir, "divide.py", FAILING_INDEX.format(fixed=str(fixed)))
    failed = run_cli("run", "divide", "--date", "2026-01-01", env=cli_env)
    assert failed.returncode == 1
    assert "divide   1      failed" in failed.stdout
    shown = json.loads(
        run_cli("runs", "show", "divide", "--date", "2026-01-01", "--json", env=cli_env).stdout
    )
    assert [(t["task_id"], t["map_index"], t["state"]) for t in shown["tasks"]] == [
        ("divide", 0, "success"),
        ("divide", 1, "failed"),
        ("divide", 2, "success"),
        ("total", -1, "upstream_failed"),
    ]

    dead = run_cli("tasks", "failed", "divide", "--json", env=cli_env)
    assert [(d["task_id"], d["map_index"]) for d in json.loads(dead.stdout)] == [("divide", 1)]
    assert "divide[1]" in run_cli("tasks", "failed", "divide", env=cli_env).stdout
    ambiguous = run_cli("logs", "divide", "divide", "2026-01-01", env=cli_env)
    assert ambiguous.returncode == 2
    assert ambiguous.stderr.strip() == (
        "error: task 'divide' is mapped (3 instances, indexes 0..2): pick one with --map-index"
    )
    one = run_cli("logs", "divide", "divide", "2026-01-01", "--map-index", "1", env=cli_env)
    assert one.returncode == 0 and "dividing 0" in one.stdout and "ZeroDivisionError" in one.stdout
    assert "of divide.divide[1]" in one.stdout
    missing = run_cli("logs", "divide", "divide", "2026-01-01", "--map-index", "7", env=cli_env)
    assert missing.returncode == 2 and "no map index 7" in missing.stderr

    fixed.touch()
    cleared = run_cli(
        "clear",
        "divide",
        "-s",
        "2026-01-01",
        "-e",
        "2026-01-01",
        "--tasks",
        "divide",
        "--downstream",
        "--map-index",
        "1",
        "--yes",
        env=cli_env,
    )
    assert cleared.returncode == 0, cleared.stderr
    assert "cleared 2 task instance(s) in 1 run(s)" in cleared.stdout
    again = run_cli("run", "divide", "--date", "2026-01-01", env=cli_env)
    assert again.returncode == 0, again.stdout + again.stderr
    got = tries(cli_env)
    assert got == {
        ("divide", 0): ("success", 1),
        ("divide", 1): ("success", 2),
        ("divide", 2): ("success", 1),
        ("total", -1): ("success", 1),
    }

    marked = run_cli(
        "tasks",
        "mark",
        "divide",
        "divide",
        "--date",
        "2026-01-01",
        "--map-index",
        "2",
        "--state",
        "failed",
        env=cli_env,
    )
    assert marked.returncode == 0, marked.stderr
    assert "marked 1 task instance(s)" in marked.stdout
    assert tries(cli_env)["divide", 2][0] == "failed"
    assert tries(cli_env)["divide", 0][0] == "success"

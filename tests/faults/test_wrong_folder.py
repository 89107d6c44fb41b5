"""A command run from the wrong folder while a scheduler runs from the right one: the
scheduler never loses a DAG, and a task it runs goes on to the end."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import db_rows, run_cli, start_cli, stop_process, wait_until, write_dag

pytestmark = pytest.mark.slow

WAITS_FOR_RELEASE = """
    from dagrun import DAG, BashTask

    with DAG("held", schedule=None):
        BashTask(
            "wait",
            command="for i in $(seq 600); do [ -f {release} ] && exit 0; sleep 0.1; done; exit 1",
        )
"""


def test_commands_from_elsewhere_never_take_a_dag_from_a_running_scheduler(
    cli_env, dags_dir: Path, tmp_path: Path
):
    release = tmp_path / "release"
    write_dag(dags_dir, "held.py", WAITS_FOR_RELEASE.format(release=release))
    env = {k: v for k, v in cli_env.items() if k != "DAGRUN_DAGS_FOLDER"}
    scheduler = start_cli(
        "scheduler",
        "--workers",
        "1",
        "--poll",
        "0.2",
        env=env,
        log=tmp_path / "sched.log",
        cwd=dags_dir.parent,
    )
    try:
        assert run_cli("trigger", "held", env=env, cwd=dags_dir.parent).returncode == 0
        wait_until(
            lambda: db_rows(env, "SELECT state FROM task_instance") == [("running",)],
            timeout=60,
            what="the task to start",
        )
        empty = tmp_path / "empty"
        empty.mkdir()
        for args, cwd in [
            (("--dags-folder", str(empty), "dags", "list"), tmp_path),
            (("dags", "list"), tmp_path),
            (("runs", "list", "held"), empty),
        ]:
            done = run_cli(*args, env=env, cwd=cwd)
            assert done.returncode == 0, done.stderr
            assert db_rows(env, "SELECT dag_id, is_active FROM dag") == [("held", 1)]
        release.touch()
        wait_until(
            lambda: db_rows(env, "SELECT state FROM dag_run") == [("success",)],
            timeout=60,
            what="the run to succeed",
        )
    finally:
        stop_process(scheduler)
    assert db_rows(env, "SELECT count(*) FROM task_attempt") == [(1,)]

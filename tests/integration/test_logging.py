"""The scheduler's log as an operator reads it: JSON lines when asked, an import error once
per change of its file, and every run that ends failed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import run_cli, start_cli, stop_process, wait_until, write_dag

pytestmark = pytest.mark.slow

FAILS = """
    from dagrun import DAG, BashTask

    with DAG("fails", schedule=None):
        BashTask("boom", command="exit 3")
"""
BROKEN = """
    from dagrun import DAG

    raise RuntimeError("the warehouse module moved")
"""


def json_lines(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]


def test_the_scheduler_logs_json_an_import_error_once_and_a_failed_run(cli_env, dags_dir, tmp_path):
    write_dag(dags_dir, "fails.py", FAILS)
    write_dag(dags_dir, "broken.py", BROKEN)
    (tmp_path / "dagrun.toml").write_text('[logging]\nformat = "json"\n')
    env = {**cli_env, "DAGRUN_CONFIG": str(tmp_path / "dagrun.toml")}
    log = tmp_path / "scheduler.log"
    scheduler = start_cli("scheduler", "--workers", "1", "--poll", "0.2", env=env, log=log)
    try:
        assert run_cli("trigger", "fails", env=env).returncode == 0
        wait_until(
            lambda: any("ended failed" in line["message"] for line in json_lines(log)),
            timeout=60,
            what="the failed run logged",
        )
        write_dag(dags_dir, "other.py", FAILS.replace('"fails"', '"other"'))
        wait_until(
            lambda: any("other.py" in line["message"] for line in json_lines(log)),
            timeout=30,
            what="a later parse",
        )
    finally:
        stop_process(scheduler)
    lines = json_lines(log)
    assert len(lines) == len(log.read_text().splitlines()), "every line is one JSON object"
    errors = [line for line in lines if "broken.py failed to import" in line["message"]]
    assert len(errors) == 1 and "the warehouse module moved" in errors[0]["message"]
    assert not [
        line for line in lines if line["message"].endswith("parsed " + str(dags_dir / "broken.py"))
    ]
    failed = next(line for line in lines if "ended failed" in line["message"])
    assert failed["level"] == "WARNING" and failed["dag_id"] == "fails"

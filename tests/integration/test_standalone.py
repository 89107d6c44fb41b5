"""``dagrun standalone`` as a newcomer runs it: the page answers, a triggered run runs, and
SIGTERM stops the scheduler, its workers and the page, leaving nothing behind."""

from __future__ import annotations

import os
import signal
import socket
import urllib.request
from pathlib import Path

import pytest

from tests.helpers import db_rows, process_gone, run_cli, start_cli, wait_until, write_dag

pytestmark = pytest.mark.slow

ONE_TASK = """
    from dagrun import DAG, BashTask

    with DAG("hello", schedule=None):
        BashTask("say", command="echo hello")
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def test_standalone_serves_runs_and_stops_whole(cli_env, dags_dir, tmp_path):
    write_dag(dags_dir, "hello.py", ONE_TASK)
    port = free_port()
    log = tmp_path / "standalone.log"
    standalone = start_cli(
        "standalone", "--port", str(port), "--workers", "1", env=cli_env, log=log
    )
    try:
        wait_until(lambda: "the web page is at" in log.read_text(), timeout=60, what="the address")
        assert f"http://127.0.0.1:{port}" in log.read_text()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as page:
            assert page.status == 200
        children = children_of(standalone.pid)
        assert len(children) == 2
        assert run_cli("trigger", "hello", env=cli_env).returncode == 0
        wait_until(
            lambda: db_rows(cli_env, "SELECT state FROM dag_run") == [("success",)],
            timeout=60,
            what="the run to succeed",
        )
    finally:
        os.kill(standalone.pid, signal.SIGTERM)
    assert standalone.wait(60) == 0, log.read_text()
    for pid in children:
        wait_until(lambda pid=pid: process_gone(pid), timeout=10, what=f"child {pid} to end")

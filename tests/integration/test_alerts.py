"""Callbacks and notifiers end to end, as a user runs them: `dagrun run` and real schedulers,
DAG files whose callbacks record what they heard, a webhook to a real HTTP server."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from dagrun.store import Store
from tests.helpers import (
    db_rows,
    process_gone,
    run_cli,
    start_cli,
    stop_process,
    wait_until,
    write_dag,
)

# Every callback appends what it heard to EVENTS, one JSON object a line.
HEARD = """
import json, os
from dagrun import DAG, task

def record(context):
    keys = ("event", "task_id", "try_number", "state", "exception", "url", "map_index", "ds")
    line = json.dumps({{k: context.get(k) for k in keys}}) + "\\n"
    fd = os.open({events!r}, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, line.encode())
    os.close(fd)
    print("heard", context["event"])

def broken(context):
    raise ValueError("alert service down")
"""

ALERTING = (
    HEARD
    + """
with DAG("alerting", schedule=None, on_failure_callback=record, on_success_callback=record):
    @task(retries=1, retry_delay=0.1, on_failure_callback=[record, broken],
          on_retry_callback=record)
    def flaky():
        raise RuntimeError("boom")

    @task(on_success_callback=record, on_failure_callback=record)
    def fine():
        return 1

    fine()
    flaky()
"""
)

MISBEHAVING = """
import os, time
from dagrun import DAG, task

def raises(context):
    raise ValueError("nope")

def hangs(context):
    time.sleep(60)

def exits(context):
    os._exit(3)

with DAG("misbehaving", schedule=None, on_success_callback=hangs):
    @task(on_success_callback=raises)
    def a(): pass

    @task(on_success_callback=hangs)
    def b(): pass

    @task(on_success_callback=exits)
    def c(): pass

    a() >> b() >> c()
"""


def heard(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def callback_rows(env: dict[str, str]) -> list[tuple]:
    return db_rows(env, "SELECT event, task_id, state, outcome_error FROM callback ORDER BY id")


@pytest.mark.slow
def test_each_event_is_heard_once_with_its_context(cli_env, dags_dir, tmp_path):
    events = tmp_path / "events.jsonl"
    write_dag(dags_dir, "alerting.py", ALERTING.format(events=str(events)))
    env = {**cli_env, "DAGRUN_WEB_URL": "http://dagrun.example:8080/"}
    done = run_cli("run", "alerting", "--run-id", "r1", env=env)
    assert done.returncode == 1, done.stderr  # the run failed, as flaky fails for good
    got = sorted(heard(events), key=lambda e: (e["event"], e["task_id"] or ""))
    assert [(e["event"], e["task_id"], e["try_number"]) for e in got] == [
        ("run_failure", None, None),
        ("task_failure", "flaky", 2),
        ("task_retry", "flaky", 1),
        ("task_success", "fine", 1),
    ]
    by_event = {e["event"]: e for e in got}
    assert by_event["task_failure"]["exception"] == "RuntimeError: boom"
    assert by_event["task_failure"]["state"] == "failed"
    assert by_event["task_retry"]["state"] == "up_for_retry"
    assert by_event["task_success"]["exception"] is None
    assert by_event["run_failure"]["exception"] == "task(s) failed: flaky"
    assert by_event["task_failure"]["url"] == (
        "http://dagrun.example:8080/dags/alerting/runs/r1/tasks/flaky/tries/2/log"
    )
    assert by_event["run_failure"]["url"] == "http://dagrun.example:8080/dags/alerting/runs/r1"
    assert {e["map_index"] for e in got} == {-1}
    rows = callback_rows(cli_env)
    assert sorted((event, state) for event, _, state, _ in rows) == [
        ("run_failure", "sent"),
        ("task_failure", "failed"),  # its second callable raised, after the first ran
        ("task_retry", "sent"),
        ("task_success", "sent"),
    ]
    [failure] = [r for r in rows if r[0] == "task_failure"]
    assert failure[3] == "on_failure_callback[1]: ValueError: alert service down"
    states = db_rows(cli_env, "SELECT task_id, state FROM task_instance ORDER BY task_id")
    assert states == [("fine", "success"), ("flaky", "failed")]

    shown = run_cli("logs", "alerting", "flaky", "--run-id", "r1", env=cli_env)
    assert shown.returncode == 0, shown.stderr
    assert "# task_failure callback: failed (on_failure_callback[1]" in shown.stderr
    assert "heard task_failure" in shown.stdout and "alert service down" in shown.stdout
    first = run_cli("logs", "alerting", "flaky", "--run-id", "r1", "--try", "1", env=cli_env)
    assert "# task_retry callback: sent" in first.stderr and "heard task_retry" in first.stdout


@pytest.mark.slow
def test_callbacks_that_raise_hang_or_exit_change_no_state(cli_env, dags_dir):
    write_dag(dags_dir, "misbehaving.py", MISBEHAVING)
    env = {**cli_env, "DAGRUN_CALLBACK_TIMEOUT": "1.5"}
    done = run_cli("run", "misbehaving", "--run-id", "r1", env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert db_rows(cli_env, "SELECT state FROM dag_run") == [("success",)]
    states = db_rows(cli_env, "SELECT state FROM task_instance")
    assert {s for (s,) in states} == {"success"}
    ended = {(task or "run"): (state, error) for _, task, state, error in callback_rows(cli_env)}
    assert ended["a"] == ("failed", "on_success_callback: ValueError: nope")
    assert (
        ended["b"][0] == "failed"
        and "timed out after 1.5 s (DAGRUN_CALLBACK_TIMEOUT)" in (ended["b"][1])
    )
    assert ended["c"] == ("failed", "exited with code 3 before finishing")
    assert ended["run"][0] == "failed" and "DAGRUN_CALLBACK_TIMEOUT" in ended["run"][1]


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("on_failure_callback", '"page me"', "on_failure_callback must be a callable"),
        ("on_retry_callback", "[print, 3]", "on_retry_callback must be a callable"),
    ],
)
def test_a_callback_that_is_not_callable_is_an_import_error(
    cli_env, dags_dir, option, value, message
):
    write_dag(
        dags_dir,
        "bad.py",
        f"""
        from dagrun import DAG, BashTask
        with DAG("bad", schedule=None):
            BashTask("t", command="true", {option}={value})
        """,
    )
    shown = run_cli("dags", "errors", env=cli_env)
    assert "bad.py" in shown.stdout and message in shown.stdout, shown.stdout
    assert "task 't' in DAG 'bad'" in shown.stdout


class _Hook(BaseHTTPRequestHandler):
    received: list[tuple[dict, dict]] = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.received.append((dict(self.headers), body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def hook_url():
    _Hook.received = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/alerts"
    server.shutdown()
    server.server_close()


@pytest.mark.slow
def test_a_webhook_and_a_command_notify_of_a_failure(cli_env, dags_dir, tmp_path, hook_url):
    out = tmp_path / "command.out"
    write_dag(
        dags_dir,
        "notified.py",
        f"""
        from dagrun import DAG, BashTask
        from dagrun.runtime import notify
        hook = notify.webhook({hook_url!r}, headers={{"Authorization": "Bearer s3cret"}})
        echo = notify.command("echo {{{{ dag_id }}}} {{{{ task_id }}}} $DAGRUN_EVENT >> {out}")
        with DAG("notified", schedule=None):
            BashTask("fails", command="exit 4", on_failure_callback=[hook, echo])
        """,
    )
    env = {**cli_env, "DAGRUN_WEB_URL": "http://web:8080"}
    done = run_cli("run", "notified", "--run-id", "r1", env=env)
    assert done.returncode == 1
    [(headers, body)] = _Hook.received
    assert headers["Authorization"] == "Bearer s3cret"
    assert body == {
        "event": "task_failure",
        "dag_id": "notified",
        "run_id": "r1",
        "task_id": "fails",
        "map_index": -1,
        "logical_date": body["logical_date"],
        "try_number": 1,
        "state": "failed",
        "error": "bash command exited with code 4",
        "url": "http://web:8080/dags/notified/runs/r1/tasks/fails/tries/1/log",
    }
    assert out.read_text() == "notified fails task_failure\n"
    shown = run_cli("logs", "notified", "fails", "--run-id", "r1", env=cli_env)
    assert "# task_failure callback: sent" in shown.stderr
    everything = shown.stdout + shown.stderr + done.stdout + done.stderr
    assert "s3cret" not in everything, "a header's secret is never logged"


@pytest.mark.slow
def test_two_schedulers_on_postgresql_fire_each_event_once(pg_url, dags_dir, tmp_path):
    events = tmp_path / "events.jsonl"
    source = HEARD.format(events=str(events)) + (
        """
from datetime import datetime, timedelta, timezone
start = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
with DAG("heard", schedule="@daily", start_date=start - timedelta(days=10), catchup=True,
         on_success_callback=record, default_args={"on_success_callback": record}):
    @task
    def one(): pass

    @task
    def two(): pass

    one() >> two()
"""
    )
    write_dag(dags_dir, "heard.py", source)
    env = {
        "DAGRUN_DB_URL": pg_url,
        "DAGRUN_HOME": str(tmp_path / "home"),
        "DAGRUN_DAGS_FOLDER": str(dags_dir),
    }
    Store(pg_url).dispose()  # the schema, before anything polls it
    schedulers = [
        start_cli(
            "scheduler", "--workers", "2", "--poll", "0.2", env=env, log=tmp_path / f"s{i}.log"
        )
        for i in range(2)
    ]
    try:

        def all_heard() -> bool:
            rows = db_rows(env, "SELECT state FROM callback")
            runs = db_rows(env, "SELECT state FROM dag_run")
            return (
                len(runs) == 10
                and {s for (s,) in runs} == {"success"}
                and len(rows) == 30
                and {s for (s,) in rows} == {"sent"}
            )

        wait_until(all_heard, 120, interval=0.2, what="every run and its callbacks to end")
    finally:
        for process in schedulers:
            stop_process(process)
    lines = [(e["event"], e["ds"], e["task_id"]) for e in heard(events)]
    assert len(lines) == 30 and len(set(lines)) == 30, "each event heard exactly once"


@pytest.mark.slow
def test_a_command_past_the_callback_time_limit_is_killed_with_its_group(
    cli_env, dags_dir, tmp_path
):
    pids = tmp_path / "pids"
    write_dag(
        dags_dir,
        "stuck.py",
        f"""
        from dagrun import DAG, BashTask
        from dagrun.runtime import notify
        stuck = notify.command("sleep 60 & echo $! > {pids}; wait", timeout=120)
        with DAG("stuck", schedule=None):
            BashTask("t", command="true", on_success_callback=stuck)
        """,
    )
    env = {**cli_env, "DAGRUN_CALLBACK_TIMEOUT": "1"}
    done = run_cli("run", "stuck", "--run-id", "r1", env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    [(state, error)] = db_rows(cli_env, "SELECT state, outcome_error FROM callback")
    assert state == "failed" and "DAGRUN_CALLBACK_TIMEOUT" in error
    sleeper = int(pids.read_text())
    wait_until(
        lambda: process_gone(sleeper), 10, what="the command's background process to be killed"
    )


def test_a_mapped_instance_is_heard_with_its_index(cli_env, dags_dir, tmp_path):
    events = tmp_path / "events.jsonl"
    source = HEARD.format(events=str(events)) + (
        """
with DAG("fanned", schedule=None):
    @task(on_failure_callback=record)
    def each(x):
        assert x != 1, "one is bad"

    each.expand(x=[0, 1, 2])
"""
    )
    write_dag(dags_dir, "fanned.py", source)
    done = run_cli("run", "fanned", "--run-id", "r1", env=cli_env)
    assert done.returncode == 1, done.stderr
    [event] = heard(events)
    assert (event["event"], event["task_id"], event["map_index"]) == ("task_failure", "each", 1)
    assert event["exception"] == "AssertionError: one is bad"

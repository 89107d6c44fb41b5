"""``dagrun trigger``, ``run --conf``, ``runs cancel|mark``, ``tasks mark``, ``audit`` and
``logs --run-id`` as an operator runs them: a subprocess per command on a fresh home (SQLite
unless a test says otherwise), the database read directly, long-running processes stopped
at the end of each test."""

from __future__ import annotations

import getpass
import json
import os
import signal
import socket
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from dagrun.store import Store
from dagrun.store.schema import dag_run, task_attempt, task_instance
from tests.helpers import (
    cli_json,
    dagrun_cmd,
    queue_run,
    run_cli,
    start_cli,
    stop_process,
    table_counts,
    wait_until,
    write_dag,
)

# A Python task returning what it was given: params (defaults overridden by the conf) and
# the raw conf; a shell task templating a param.
GREET = """
from dagrun import DAG, BashTask, Param, task

with DAG("greet", schedule=None,
         params={"n": Param(5, type="integer", minimum=1), "region": "EU"}):

    @task
    def show(params, conf):
        print(f"show got params={params} conf={conf}")
        return {"params": params, "conf": conf}

    say = BashTask("say", command="echo region {{ params.region }} n {{ params.n }}")
    show() >> say
"""

# up fails while the flag file exists; down does not need up's value.
CHAIN = """
import os
from dagrun import DAG, task

with DAG("chain", schedule=None, default_args={{"retries": 0}}):

    @task
    def up():
        if os.path.exists({flag!r}):
            raise RuntimeError("up cannot run while the flag is set")
        print("up ran")

    @task
    def down():
        print("down ran")
        return "down done"

    up() >> down()
"""

# The first try hangs (the process running it is killed); later tries finish at once.
HANGING = """
import time
from dagrun import DAG, task

with DAG("hanging", schedule=None, default_args={"retries": 0}):

    @task
    def work(try_number):
        if try_number == 1:
            time.sleep(120)
        return try_number

    work()
"""

ONE_TASK = """
from dagrun import DAG, task

with DAG({dag_id!r}, schedule=None, max_active_runs=16):

    @task
    def only():
        return {dag_id!r}

    only()
"""


def dagrun(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return run_cli(*args, env=env, timeout=60)


def ok(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    result = dagrun(*args, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def assert_bad_input(result: subprocess.CompletedProcess, *words: str) -> str:
    """Exit 2 with exactly one line on stderr, starting ``error:``; returns that line."""
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error:"), lines[0]
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def store(cli_env: dict[str, str]):
    """The CLI home's database, opened by the test to set up and read state directly."""
    Path(cli_env["DAGRUN_HOME"]).mkdir(parents=True, exist_ok=True)
    s = Store(cli_env["DAGRUN_DB_URL"])
    yield s
    s.dispose()


@pytest.fixture
def greet(cli_env: dict[str, str], dags_dir: Path) -> dict[str, str]:
    write_dag(dags_dir, "greet.py", GREET)
    return cli_env


@pytest.fixture
def flag(tmp_path: Path, dags_dir: Path) -> Path:
    """While this file exists, ``chain.up`` fails."""
    path = tmp_path / "up-fails"
    path.touch()
    write_dag(dags_dir, "chain.py", CHAIN.format(flag=str(path)))
    return path


def run_row(store: Store, dag_id: str, run_id: str) -> dict:
    with store.read() as conn:
        query = select(dag_run).where(dag_run.c.dag_id == dag_id, dag_run.c.run_id == run_id)
        return dict(conn.execute(query).mappings().one())


def task_rows(store: Store, dag_id: str, run_id: str) -> dict[str, dict]:
    """{task_id: task_instance row} of one run."""
    run_pk = run_row(store, dag_id, run_id)["id"]
    with store.read() as conn:
        rows = conn.execute(select(task_instance).where(task_instance.c.run_pk == run_pk))
        return {r["task_id"]: dict(r) for r in rows.mappings()}


def attempts_of(store: Store, dag_id: str, run_id: str | None = None) -> list[dict]:
    query = select(task_attempt).where(task_attempt.c.dag_id == dag_id)
    if run_id is not None:
        query = query.where(task_attempt.c.run_pk == run_row(store, dag_id, run_id)["id"])
    with store.read() as conn:
        return [dict(r) for r in conn.execute(query.order_by(task_attempt.c.id)).mappings()]


def run_state(store: Store, dag_id: str, run_id: str) -> str:
    return run_row(store, dag_id, run_id)["state"]


def start_scheduler(env: dict[str, str], tmp_path: Path) -> subprocess.Popen:
    return start_cli(
        "scheduler", "--workers", "1", "--poll", "0.2", env=env, log=tmp_path / "scheduler.log"
    )


def scheduler_log(tmp_path: Path) -> str:
    path = tmp_path / "scheduler.log"
    return path.read_text() if path.exists() else ""


# ---------------------------------------------------------------- trigger


@pytest.mark.slow
def test_trigger_json_and_the_same_key_makes_nothing(greet):
    first = cli_json("trigger", "greet", "--run-id", "eu-42", env=greet)
    assert set(first) == {"run_id", "logical_date", "state", "created"}
    assert first["run_id"] == "eu-42" and first["created"] is True
    assert first["state"] == "waiting"  # no scheduler: it waits for one
    logical = datetime.fromisoformat(first["logical_date"])
    assert abs(datetime.now(UTC) - logical) < timedelta(seconds=30)
    before = table_counts(greet)

    again = cli_json("trigger", "greet", "--run-id", "eu-42", "--conf", '{"n": 9}', env=greet)
    assert again == {**first, "created": False}
    assert table_counts(greet) == before
    (run,) = cli_json("runs", "list", "greet", env=greet)
    assert (run["run_id"], run["run_type"], run["conf"]) == ("eu-42", "manual", {})

    text = ok("trigger", "greet", "--run-id", "eu-42", env=greet)
    assert "eu-42" in text.stdout and "nothing triggered" in text.stdout
    assert table_counts(greet) == before


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("greet", "--conf", "not json"), ["--conf", "not JSON"]),
        (("greet", "--conf", "[1]"), ["--conf", "JSON object"]),
        (("greet", "--conf", '{"n": 0}'), ["param 'n'"]),
        (("greet", "--conf", '{"n": "three"}'), ["param 'n'"]),
        (("nope",), ["nope"]),
        (("greet", "--at", "garbage"), ["--at", "garbage"]),
        (("greet", "--at", "+soon"), ["--at"]),
        (("greet", "--run-id", "a/b"), ["--run-id"]),
        (("greet", "--run-id", "with space"), ["--run-id"]),
        (("greet", "--run-id", ".."), ["--run-id"]),
    ],
    ids=[
        "conf-not-json",
        "conf-a-list",
        "conf-below-minimum",
        "conf-wrong-type",
        "unknown-dag",
        "at-garbage",
        "at-bad-duration",
        "run-id-slash",
        "run-id-space",
        "run-id-dots",
    ],
)
def test_trigger_bad_input_exits_2_and_makes_no_run(greet, args, words):
    ok("dags", "list", env=greet)  # the DAG rows exist; the bad trigger must add nothing
    before = table_counts(greet)
    assert_bad_input(dagrun("trigger", *args, env=greet), *words)
    assert table_counts(greet) == before
    assert before["dag_run"] == 0


def test_trigger_at_a_past_instant_starts_now_and_says_so(greet, store):
    result = ok("trigger", "greet", "--run-id", "late", "--at", "2020-01-01T00:00", env=greet)
    assert "in the past" in result.stderr and "starts now" in result.stderr
    assert run_row(store, "greet", "late")["not_before"] is None


def test_trigger_help_shows_an_example(greet):
    shown = ok("trigger", "--help", env=greet).stdout
    assert "Example" in shown
    assert "dagrun trigger nightly_sales --conf" in shown
    assert "--at" in shown and "--run-id" in shown


def start_triggers(env: dict[str, str], *args: str) -> list[subprocess.Popen]:
    """Two ``dagrun trigger`` processes started together (they meet in the database)."""
    return [
        subprocess.Popen(
            dagrun_cmd("trigger", *args, "--json"),
            env={**os.environ, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]


def outputs(processes: list[subprocess.Popen]) -> list[dict]:
    documents = []
    for process in processes:
        out, err = process.communicate(timeout=60)
        assert process.returncode == 0, out + err
        documents.append(json.loads(out))
    return documents


@pytest.mark.slow
def test_two_triggers_at_once(greet, db_url):
    env = {**greet, "DAGRUN_DB_URL": db_url}  # a fresh database: both make its schema too
    unkeyed = outputs(start_triggers(env, "greet"))
    assert [d["created"] for d in unkeyed] == [True, True]
    assert unkeyed[0]["run_id"] != unkeyed[1]["run_id"]
    runs = cli_json("runs", "list", "greet", env=env)
    assert sorted(r["run_id"] for r in runs) == sorted(d["run_id"] for d in unkeyed)

    keyed = outputs(start_triggers(env, "greet", "--run-id", "once-only"))
    assert sorted(d["created"] for d in keyed) == [False, True]
    assert {d["run_id"] for d in keyed} == {"once-only"}
    assert keyed[0]["logical_date"] == keyed[1]["logical_date"]
    runs = cli_json("runs", "list", "greet", env=env)
    assert len(runs) == 3
    assert [r["run_id"] for r in runs].count("once-only") == 1


# ---------------------------------------------------------------- the scheduler runs them


@pytest.mark.slow
def test_scheduler_runs_a_triggered_run_with_its_conf(greet, store, tmp_path):
    scheduler = start_scheduler(greet, tmp_path)
    try:
        conf = '{"n": 7, "extra": [1]}'
        ok("trigger", "greet", "--run-id", "with-conf", "--conf", conf, env=greet)
        ok("trigger", "greet", "--run-id", "defaults", env=greet)
        for run_id in ("with-conf", "defaults"):
            wait_until(
                lambda run_id=run_id: run_state(store, "greet", run_id) == "success",
                45,
                what=f"the scheduler to run {run_id} ({scheduler_log(tmp_path)[-500:]})",
            )
    finally:
        stop_process(scheduler)

    shown = cli_json("runs", "show", "greet", "with-conf", env=greet)
    assert shown["conf"] == {"n": 7, "extra": [1]}
    assert {t["task_id"]: t["state"] for t in shown["tasks"]} == {
        "show": "success",
        "say": "success",
    }
    returned = json.loads(task_rows(store, "greet", "with-conf")["show"]["return_value"])
    assert returned == {
        "params": {"n": 7, "region": "EU", "extra": [1]},
        "conf": {"n": 7, "extra": [1]},
    }
    said = ok("logs", "greet", "say", "--run-id", "with-conf", env=greet).stdout
    assert "region EU n 7" in said

    assert cli_json("runs", "show", "greet", "defaults", env=greet)["conf"] == {}
    returned = json.loads(task_rows(store, "greet", "defaults")["show"]["return_value"])
    assert returned == {"params": {"n": 5, "region": "EU"}, "conf": {}}


@pytest.mark.slow
def test_nothing_of_a_delayed_run_starts_before_its_instant(greet, store, tmp_path):
    scheduler = start_scheduler(greet, tmp_path)
    try:
        # The scheduler is up and running runs before the delayed ones are triggered.
        ok("trigger", "greet", "--run-id", "now", env=greet)
        wait_until(lambda: run_state(store, "greet", "now") == "success", 45, what="run 'now'")

        at = (datetime.now(UTC) + timedelta(seconds=5)).replace(microsecond=0)
        ok("trigger", "greet", "--run-id", "at-instant", "--at", at.isoformat(), env=greet)
        before_relative = datetime.now(UTC)
        relative = ok("trigger", "greet", "--run-id", "in-3s", "--at", "+3s", env=greet)
        after_relative = datetime.now(UTC)
        assert "starts at" in relative.stdout

        assert run_row(store, "greet", "at-instant")["not_before"] == at
        not_before = run_row(store, "greet", "in-3s")["not_before"]
        span = timedelta(seconds=3)
        assert before_relative + span <= not_before <= after_relative + span
        for run_id in ("at-instant", "in-3s"):
            wait_until(
                lambda run_id=run_id: run_state(store, "greet", run_id) == "success",
                45,
                what=f"the delayed run {run_id} ({scheduler_log(tmp_path)[-500:]})",
            )
    finally:
        stop_process(scheduler)

    for run_id, instant in (("at-instant", at), ("in-3s", not_before)):
        run = run_row(store, "greet", run_id)
        assert run["start_date"] >= instant, (run_id, run["start_date"], instant)
        starts = [a["started_at"] for a in attempts_of(store, "greet", run_id)]
        assert len(starts) == 2
        assert min(starts) >= instant, (run_id, starts, instant)
        for task in task_rows(store, "greet", run_id).values():
            assert task["start_date"] >= instant, (run_id, task, instant)


# ---------------------------------------------------------------- run executes only its own


def test_run_executes_only_its_own_run(cli_env, dags_dir, store):
    for dag_id in ("mine", "theirs"):
        write_dag(dags_dir, f"{dag_id}.py", ONE_TASK.format(dag_id=dag_id))
    theirs = queue_run(store, dags_dir, "theirs", run_id="queued-theirs")
    queue_run(store, dags_dir, "mine", run_id="queued-mine")

    done = ok("run", "mine", "--run-id", "by-hand", env=cli_env)
    assert "run by-hand: success" in done.stdout

    assert task_rows(store, "mine", "by-hand")["only"]["state"] == "success"
    for dag_id, run_id in (("theirs", "queued-theirs"), ("mine", "queued-mine")):
        task = task_rows(store, dag_id, run_id)["only"]
        assert (task["state"], task["try_number"], task["lease_owner"]) == ("queued", 0, None)
        assert run_state(store, dag_id, run_id) == "running"
    assert attempts_of(store, "theirs") == []
    assert [a["run_pk"] for a in attempts_of(store, "mine")] == [
        run_row(store, "mine", "by-hand")["id"]
    ]
    assert run_row(store, "theirs", "queued-theirs")["id"] == theirs


def test_run_with_the_key_of_a_queued_run_resumes_it(cli_env, dags_dir, store):
    write_dag(dags_dir, "mine.py", ONE_TASK.format(dag_id="mine"))
    queue_run(store, dags_dir, "mine", run_id="K")
    assert task_rows(store, "mine", "K")["only"]["state"] == "queued"

    resumed = ok("run", "mine", "--run-id", "K", env=cli_env)
    assert "resuming" in resumed.stderr
    assert "run K: success" in resumed.stdout
    assert run_state(store, "mine", "K") == "success"
    assert [a["outcome"] for a in attempts_of(store, "mine", "K")] == ["success"]
    assert len(cli_json("runs", "list", "mine", env=cli_env)) == 1


@pytest.mark.slow
def test_run_with_the_key_of_a_killed_run_resumes_it(cli_env, dags_dir, store, tmp_path):
    write_dag(dags_dir, "hanging.py", HANGING)
    env = {**cli_env, "DAGRUN_LEASE_SECONDS": "2"}
    first = start_cli("run", "hanging", "--run-id", "K", env=env, log=tmp_path / "first.log")
    try:

        def running() -> bool:
            try:
                return task_rows(store, "hanging", "K")["work"]["state"] == "running"
            except Exception:  # the run is not there yet
                return False

        wait_until(running, 30, what="the first `dagrun run` to start the task")
        os.killpg(first.pid, signal.SIGKILL)  # the command and its worker children
        first.wait(10)
    finally:
        stop_process(first)
    assert run_state(store, "hanging", "K") == "running"

    resumed = dagrun("run", "hanging", "--run-id", "K", env=env)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "resuming" in resumed.stderr
    assert run_state(store, "hanging", "K") == "success"
    task = task_rows(store, "hanging", "K")["work"]
    assert (task["state"], json.loads(task["return_value"])) == ("success", 2)
    outcomes = [(a["try_number"], a["outcome"]) for a in attempts_of(store, "hanging", "K")]
    assert outcomes == [(1, "lease_expired"), (2, "success")]


# ---------------------------------------------------------------- cancel, mark


@pytest.mark.slow
def test_cancel_a_finished_run_changes_nothing(cli_env, flag):
    assert dagrun("run", "chain", "--run-id", "K", env=cli_env).returncode == 1
    before = table_counts(cli_env)
    shown = cli_json("runs", "show", "chain", "K", env=cli_env)

    result = ok("runs", "cancel", "chain", "K", env=cli_env)
    assert "nothing to cancel" in result.stdout and "failed" in result.stdout
    assert table_counts(cli_env) == before
    assert cli_json("runs", "show", "chain", "K", env=cli_env) == shown

    assert_bad_input(dagrun("runs", "cancel", "chain", "nope", env=cli_env), "nope")
    assert_bad_input(dagrun("runs", "cancel", "chain", env=cli_env))
    assert_bad_input(dagrun("runs", "cancel", "nodag", "K", env=cli_env), "nodag")
    assert_bad_input(
        dagrun("runs", "mark", "chain", "nope", "--state", "success", env=cli_env), "nope"
    )
    assert table_counts(cli_env) == before


def test_cancel_a_waiting_run_skips_its_tasks(cli_env, flag, store):
    ok("trigger", "chain", "--run-id", "W", env=cli_env)
    result = ok("runs", "cancel", "chain", "W", env=cli_env)
    assert "cancelled run W" in result.stdout
    assert run_state(store, "chain", "W") == "failed"
    tasks = task_rows(store, "chain", "W")
    assert {t: (r["state"], r["last_error"]) for t, r in tasks.items()} == {
        "up": ("skipped", "cancelled"),
        "down": ("skipped", "cancelled"),
    }
    assert attempts_of(store, "chain") == []


@pytest.mark.slow
def test_mark_a_failed_run_success(cli_env, flag, store):
    assert dagrun("run", "chain", "--run-id", "K", env=cli_env).returncode == 1
    assert run_state(store, "chain", "K") == "failed"
    marked = ok("runs", "mark", "chain", "K", "--state", "success", env=cli_env)
    assert "success" in marked.stdout
    assert run_state(store, "chain", "K") == "success"
    tasks = task_rows(store, "chain", "K")
    assert {t: (r["state"], r["last_error"]) for t, r in tasks.items()} == {
        "up": ("success", "run marked success by hand"),
        "down": ("success", "run marked success by hand"),
    }, "a successful run shows no failed task"
    assert cli_json("runs", "list", "chain", "--state", "success", env=cli_env)[0]["run_id"] == "K"
    again = ok("runs", "mark", "chain", "K", "--state", "success", env=cli_env)
    assert "nothing changed" in again.stdout


def test_marking_a_failed_upstream_success_lets_its_downstream_run(cli_env, flag, store):
    failed = dagrun("run", "chain", "--run-id", "K", env=cli_env)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert {t: r["state"] for t, r in task_rows(store, "chain", "K").items()} == {
        "up": "failed",
        "down": "upstream_failed",
    }

    marked = ok("tasks", "mark", "chain", "up", "--state", "success", "--run-id", "K", env=cli_env)
    assert "marked 1 task instance(s) of run K success" in marked.stdout
    assert run_state(store, "chain", "K") not in ("success", "failed")  # reopened
    assert task_rows(store, "chain", "K")["down"]["state"] == "none"

    resumed = ok("run", "chain", "--run-id", "K", env=cli_env)  # the flag is still set
    assert "run K: success" in resumed.stdout
    tasks = task_rows(store, "chain", "K")
    assert {t: r["state"] for t, r in tasks.items()} == {"up": "success", "down": "success"}
    assert json.loads(tasks["down"]["return_value"]) == "down done"
    assert [(a["task_id"], a["outcome"]) for a in attempts_of(store, "chain", "K")] == [
        ("up", "failed"),
        ("down", "success"),
    ]


@pytest.mark.slow
def test_audit_lists_operator_actions_newest_first(cli_env, flag, dags_dir):
    write_dag(dags_dir, "greet.py", GREET)
    ok("trigger", "chain", "--run-id", "T", "--conf", '{"why": "test"}', env=cli_env)
    ok("runs", "cancel", "chain", "T", env=cli_env)
    assert dagrun("run", "chain", "--run-id", "R", env=cli_env).returncode == 1
    ok("runs", "mark", "chain", "R", "--state", "success", env=cli_env)
    ok("tasks", "mark", "chain", "up", "--state", "success", "--run-id", "R", env=cli_env)
    ok("trigger", "greet", "--run-id", "G", env=cli_env)
    ok("runs", "cancel", "chain", "T", env=cli_env)  # nothing to cancel: not audited

    entries = cli_json("audit", env=cli_env)
    assert all(
        set(e) == {"at", "actor", "action", "dag_id", "run_id", "detail"} for e in entries
    ), entries
    assert [(e["action"], e["dag_id"], e["run_id"]) for e in entries] == [
        ("trigger", "greet", "G"),
        ("mark_task", "chain", "R"),
        ("mark_run", "chain", "R"),
        ("trigger", "chain", "R"),
        ("cancel", "chain", "T"),
        ("trigger", "chain", "T"),
    ]
    instants = [datetime.fromisoformat(e["at"]) for e in entries]
    assert instants == sorted(instants, reverse=True)
    assert {e["actor"] for e in entries} == {f"{getpass.getuser()}@{socket.gethostname()}"}
    by_action = {(e["action"], e["run_id"]): e["detail"] for e in entries}
    assert by_action[("trigger", "T")]["conf"] == {"why": "test"}
    assert by_action[("mark_run", "R")]["state"] == "success"
    assert by_action[("mark_task", "R")]["task_id"] == "up"
    assert by_action[("mark_task", "R")]["state"] == "success"

    chain_only = cli_json("audit", "chain", env=cli_env)
    assert chain_only == [e for e in entries if e["dag_id"] == "chain"]
    table = ok("audit", "greet", env=cli_env).stdout.splitlines()
    assert len(table) == 2 and "trigger" in table[1] and "G" in table[1]
    assert_bad_input(dagrun("audit", "nodag", env=cli_env), "nodag")


# ---------------------------------------------------------------- logs of a manual run


@pytest.mark.slow
def test_logs_of_a_manual_run_by_run_id(greet):
    ok("run", "greet", "--run-id", "L", "--conf", '{"n": 3}', env=greet)
    ok("run", "greet", "--run-id", "M", env=greet)
    shown = ok("logs", "greet", "show", "--run-id", "L", env=greet)
    assert "show got params={'n': 3, 'region': 'EU'} conf={'n': 3}" in shown.stdout
    assert "conf={}" not in shown.stdout
    other = ok("logs", "greet", "show", "--run-id", "M", env=greet)
    assert "show got params={'n': 5, 'region': 'EU'} conf={}" in other.stdout
    assert "region EU n 3" in ok("logs", "greet", "say", "--run-id", "L", env=greet).stdout
    assert_bad_input(dagrun("logs", "greet", "show", "--run-id", "nope", env=greet), "nope")

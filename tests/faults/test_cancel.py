"""``dagrun runs cancel`` against a real ``dagrun worker`` on a connection of its own: the
attempt's processes are stopped, its outcome is ``failed``/``cancelled``, and whatever it
reports afterwards is kept as a stale late result, never as the task's result."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path

import pytest
from sqlalchemy import select, text

from dagrun.store import Store
from dagrun.store.schema import dag_run, task_attempt, task_instance
from tests.faults.test_worker_faults import pause_outside_a_transaction, worker_env
from tests.helpers import (
    process_gone,
    queue_run,
    run_cli,
    start_cli,
    stop_process,
    wait_until,
    write_dag,
)

pytestmark = pytest.mark.slow

#: The shell writes its own pid and its sleep's, then waits: SIGTERM to its process group
#: ends both.
SHELL = "sleep 60 & echo $$ $! > {pids}.tmp && mv {pids}.tmp {pids}; wait"
#: This one notes the SIGTERM and runs on: only the kill after the stop grace ends it.
STUBBORN_SHELL = (
    "trap 'echo TERM >> {pids}.term' TERM; echo $$ > {pids}.tmp && mv {pids}.tmp {pids}; "
    "while :; do sleep 0.1; done"
)
SHELL_DAG = """
from dagrun import DAG, BashTask, task

with DAG("long_shell", schedule=None, default_args={{"retries": 0}}):
    work = BashTask("work", command={command!r})

    @task
    def after():
        return "after ran"

    work >> after()
"""

#: The attempt marks when it started and when it finished (the worker may be paused then).
PYTHON_DAG = """
import os, time
from pathlib import Path
from dagrun import DAG, task

with DAG("long_python", schedule=None, max_active_runs=16, default_args={{"retries": 0}}):

    @task
    def work(run_id):
        Path({marks!r}, run_id + ".started").write_text(str(os.getpid()))
        time.sleep({{"paused": 3, "hanging": 60}}.get(run_id, 0))
        Path({marks!r}, run_id + ".finished").touch()
        return {{"worker_pid": os.getppid()}}

    @task
    def after():
        return "after ran"

    work() >> after()
"""


def cli_env(db_url: str, dags_dir: Path, tmp_path: Path) -> dict[str, str]:
    """The worker's and the operator's environment: one database, short leases."""
    return {**worker_env(db_url, tmp_path, lease=2), "DAGRUN_DAGS_FOLDER": str(dags_dir)}


def tasks(store: Store, run_pk: int) -> dict[str, dict]:
    with store.read() as conn:
        rows = conn.execute(select(task_instance).where(task_instance.c.run_pk == run_pk))
        return {r["task_id"]: dict(r) for r in rows.mappings()}


def run_state(store: Store, run_pk: int) -> str:
    with store.read() as conn:
        return conn.execute(select(dag_run.c.state).where(dag_run.c.id == run_pk)).scalar_one()


def attempts(store: Store, run_pk: int) -> list[dict]:
    query = select(task_attempt).where(task_attempt.c.run_pk == run_pk)
    with store.read() as conn:
        return [dict(r) for r in conn.execute(query.order_by(task_attempt.c.id)).mappings()]


def held_by(store: Store, run_pk: int, task_id: str, process) -> dict | None:
    row = tasks(store, run_pk).get(task_id)
    owner = (row or {}).get("lease_owner") or ""
    return row if row["state"] == "running" and f":{process.pid}:" in owner else None


def cancel(env: dict[str, str], dag_id: str, run_id: str) -> str:
    result = run_cli("runs", "cancel", dag_id, run_id, env=env, timeout=30)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def assert_cancelled(store: Store, run_pk: int) -> dict:
    """The run is failed, ``work`` failed with its one attempt ``failed``/``cancelled``,
    ``after`` skipped; returns that attempt."""
    assert run_state(store, run_pk) == "failed"
    rows = tasks(store, run_pk)
    assert (rows["work"]["state"], rows["work"]["last_error"]) == ("failed", "cancelled")
    assert rows["work"]["return_value"] is None
    assert rows["after"]["state"] == "skipped"
    (attempt,) = attempts(store, run_pk)
    assert (attempt["outcome"], attempt["error"]) == ("failed", "cancelled")
    return attempt


def test_cancel_stops_the_running_shell(db_url, dags_dir, tmp_path):
    store = Store(db_url)
    pids = tmp_path / "pids"
    write_dag(dags_dir, "long_shell.py", SHELL_DAG.format(command=SHELL.format(pids=pids)))
    run_pk = queue_run(store, dags_dir, "long_shell", run_id="C")
    env = cli_env(db_url, dags_dir, tmp_path)
    log = tmp_path / "worker.log"
    worker = start_cli("worker", "-c", "1", "--poll", "0.2", env=env, log=log)
    shell = sleeper = None
    try:
        wait_until(lambda: held_by(store, run_pk, "work", worker), 30, what="the claim")
        wait_until(pids.exists, 30, what="the shell to write its pid")
        shell, sleeper = (int(p) for p in pids.read_text().split())
        assert not process_gone(shell) and not process_gone(sleeper)

        cancelled = time.monotonic()
        said = cancel(env, "long_shell", "C")
        assert "1 running attempt(s) stopped, 1 unstarted task(s) skipped" in said
        attempt = assert_cancelled(store, run_pk)  # at once, before the worker noticed
        # SIGTERM (not the kill after the 10 s stop grace) ends the shell and its sleep.
        wait_until(
            lambda: process_gone(shell) and process_gone(sleeper), 8, what="the shell to end"
        )
        assert time.monotonic() - cancelled < 10

        wait_until(lambda: attempts(store, run_pk)[0]["late_result"], 20, what="the late result")
        assert assert_cancelled(store, run_pk)["fence_token"] == attempt["fence_token"]
        late = attempts(store, run_pk)[0]["late_result"]
        assert late.startswith("finished as failed") and "after its lease was lost" in late
        assert "stopping 1 attempt(s) an operator cancelled or marked" in log.read_text()
        assert worker.poll() is None, log.read_text()
    finally:
        for pid in (shell, sleeper):
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        stop_process(worker)
        store.dispose()


def test_cancel_while_the_worker_is_paused(db_url, dags_dir, tmp_path):
    store = Store(db_url)
    marks = tmp_path / "marks"
    marks.mkdir()
    write_dag(dags_dir, "long_python.py", PYTHON_DAG.format(marks=str(marks)))
    run_pk = queue_run(store, dags_dir, "long_python", run_id="paused")
    env = cli_env(db_url, dags_dir, tmp_path)
    log = tmp_path / "worker.log"
    worker = start_cli("worker", "-c", "1", "--poll", "0.2", env=env, log=log)
    try:
        claimed = wait_until(lambda: held_by(store, run_pk, "work", worker), 30, what="claim")
        wait_until((marks / "paused.started").exists, 30, what="the attempt to start")
        wait_until(
            lambda: pause_between_transactions(store, worker.pid),
            30,
            what="the worker paused while its attempt runs",
        )
        said = cancel(env, "long_python", "paused")
        assert "1 running attempt(s) stopped" in said
        attempt = assert_cancelled(store, run_pk)  # the paused worker did not hold it up
        assert attempt["fence_token"] == claimed["fence_token"]
        assert attempt["late_result"] is None
        # The attempt's own process is not paused: it finishes while its worker is.
        wait_until((marks / "paused.finished").exists, 30, what="the attempt to finish")
        os.kill(worker.pid, signal.SIGCONT)

        wait_until(
            lambda: attempts(store, run_pk)[0]["late_result"], 30, what="the late completion"
        )
        assert_cancelled(store, run_pk)  # rejected: nothing of it counts
        late = attempts(store, run_pk)[0]["late_result"]
        assert late.startswith("finished as") and "after its lease was lost" in late

        # The worker goes on working: a run queued after the cancel completes on it.
        later = queue_run(store, dags_dir, "long_python", run_id="later")
        wait_until(lambda: run_state(store, later) == "success", 30, what="the next run")
        value = json.loads(tasks(store, later)["work"]["return_value"])
        assert value == {"worker_pid": worker.pid}
        assert worker.poll() is None, log.read_text()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker.pid, signal.SIGCONT)
        stop_process(worker)
        store.dispose()


def test_a_shell_that_ignores_sigterm_is_killed_after_the_stop_grace(
    sqlite_url, dags_dir, tmp_path
):
    store = Store(sqlite_url)
    pids = tmp_path / "pids"
    term = tmp_path / "pids.term"
    write_dag(dags_dir, "long_shell.py", SHELL_DAG.format(command=STUBBORN_SHELL.format(pids=pids)))
    run_pk = queue_run(store, dags_dir, "long_shell", run_id="C")
    env = cli_env(sqlite_url, dags_dir, tmp_path)
    log = tmp_path / "worker.log"
    worker = start_cli("worker", "-c", "1", "--poll", "0.2", env=env, log=log)
    shell = None
    try:
        wait_until(pids.exists, 30, what="the shell to write its pid")
        shell = int(pids.read_text())
        cancel(env, "long_shell", "C")
        wait_until(term.exists, 8, what="the SIGTERM to reach the shell")
        termed = time.monotonic()
        assert not process_gone(shell)  # it ignored the SIGTERM
        wait_until(lambda: process_gone(shell), 20, what="the kill after the stop grace")
        waited = time.monotonic() - termed
        assert 8 <= waited <= 15, f"killed {waited:.1f}s after the SIGTERM (stop grace: 10s)"

        wait_until(lambda: attempts(store, run_pk)[0]["late_result"], 20, what="late result")
        assert_cancelled(store, run_pk)
        assert "after its lease was lost" in attempts(store, run_pk)[0]["late_result"]
        assert worker.poll() is None, log.read_text()
    finally:
        if shell is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(shell, signal.SIGKILL)
        stop_process(worker)
        store.dispose()


def test_a_cancelled_python_attempt_is_killed_at_once(db_url, dags_dir, tmp_path):
    store = Store(db_url)
    marks = tmp_path / "marks"
    marks.mkdir()
    write_dag(dags_dir, "long_python.py", PYTHON_DAG.format(marks=str(marks)))
    run_pk = queue_run(store, dags_dir, "long_python", run_id="hanging")
    env = cli_env(db_url, dags_dir, tmp_path)
    log = tmp_path / "worker.log"
    worker = start_cli("worker", "-c", "1", "--poll", "0.2", env=env, log=log)
    try:
        started = marks / "hanging.started"
        wait_until(lambda: started.exists() and started.read_text(), 30, what="the attempt")
        child = int(started.read_text())  # the worker's child running the attempt
        assert not process_gone(child)
        cancel(env, "long_python", "hanging")
        assert_cancelled(store, run_pk)
        # No grace for Python code: its child is killed (and replaced) well before 10 s.
        wait_until(lambda: process_gone(child), 5, what="the attempt's process to be killed")
        wait_until(lambda: attempts(store, run_pk)[0]["late_result"], 20, what="late result")
        assert_cancelled(store, run_pk)
        assert not (marks / "hanging.finished").exists()

        later = queue_run(store, dags_dir, "long_python", run_id="later")
        wait_until(lambda: run_state(store, later) == "success", 30, what="the next run")
        assert json.loads(tasks(store, later)["work"]["return_value"]) == {"worker_pid": worker.pid}
    finally:
        stop_process(worker)
        store.dispose()


def test_cancel_ends_the_dagrun_run_executing_the_run(db_url, dags_dir, tmp_path):
    store = Store(db_url)
    pids = tmp_path / "pids"
    write_dag(dags_dir, "long_shell.py", SHELL_DAG.format(command=SHELL.format(pids=pids)))
    env = cli_env(db_url, dags_dir, tmp_path)
    out = tmp_path / "run.log"
    running = start_cli("run", "long_shell", "--run-id", "R", env=env, log=out)
    shell = sleeper = None
    try:
        wait_until(pids.exists, 30, what="the shell to write its pid")
        shell, sleeper = (int(p) for p in pids.read_text().split())
        cancel(env, "long_shell", "R")
        assert running.wait(15) == 1, out.read_text()
        assert "run R: failed" in out.read_text()
        wait_until(
            lambda: process_gone(shell) and process_gone(sleeper), 8, what="the shell to end"
        )
        with store.read() as conn:
            run_pk = conn.execute(select(dag_run.c.id).where(dag_run.c.run_id == "R")).scalar_one()
        assert_cancelled(store, run_pk)
    finally:
        for pid in (shell, sleeper):
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        stop_process(running)
        store.dispose()


def pause_between_transactions(store: Store, pid: int) -> bool:
    """SIGSTOP ``pid`` outside a transaction of its own; True if it is paused so, else
    resume it and say False. On PostgreSQL a worker paused inside a transaction would hold
    its row locks (until ``idle_in_transaction_session_timeout``): its sessions must be
    idle."""
    if store.dialect == "sqlite":
        return pause_outside_a_transaction(store, pid)
    os.kill(pid, signal.SIGSTOP)
    wait_until(lambda: _stopped(pid), 5, what=f"process {pid} to stop")
    ports = _tcp_ports(pid)
    for _ in range(2):  # twice: a statement sent just before the stop lands in between
        if _sessions_busy(store, ports):
            os.kill(pid, signal.SIGCONT)
            return False
        time.sleep(0.05)
    return True


def _stopped(pid: int) -> bool:
    stats = Path(f"/proc/{pid}/task").glob("*/stat")
    return all(s.read_text().rpartition(")")[2].split()[0] == "T" for s in stats)


def _tcp_ports(pid: int) -> set[int]:
    """The local TCP ports of the sockets ``pid`` holds (its database connections)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
    ports = set()
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                fields = line.split()
                if fields[9] in inodes:
                    ports.add(int(fields[1].rpartition(":")[2], 16))
    return ports


def _sessions_busy(store: Store, ports: set[int]) -> bool:
    """Is a PostgreSQL session of these client ports in a transaction or a statement?"""
    if not ports:
        return False
    query = text(
        "SELECT count(*) FROM pg_stat_activity WHERE client_port = ANY(:ports) "
        "AND state IS DISTINCT FROM 'idle' AND pid <> pg_backend_pid()"
    )
    with store.engine.connect() as conn:
        return conn.execute(query, {"ports": sorted(ports)}).scalar_one() > 0

"""Shared test helpers: waiting on conditions with a deadline, running the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path


def bare_spec(*tasks, dag_id: str = "d"):
    """A DagSpec of these TaskSpecs and nothing else (unscheduled, UTC)."""
    from dagrun.parsing.spec import DagSpec

    return DagSpec(
        dag_id=dag_id,
        fileloc=f"/{dag_id}.py",
        schedule=None,
        timezone="UTC",
        start_date=None,
        end_date=None,
        catchup=True,
        max_active_runs=1,
        tasks=tuple(tasks),
    )


def task_context(db_url: str, when):
    """A task context on the store at ``db_url`` (what an attempt's helpers reach it by)."""
    from dagrun.runtime.context import make_context

    return make_context(
        dag_id="d",
        task_id="t",
        run_id="r",
        timezone="UTC",
        logical_date=when,
        data_interval_start=when,
        data_interval_end=when,
        db_url=db_url,
    )


def wait_until(
    predicate: Callable[[], object],
    timeout: float = 30.0,
    interval: float = 0.05,
    what: str = "condition",
) -> object:
    """Poll ``predicate`` until it returns something truthy; fail the test past ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def process_gone(pid: int) -> bool:
    """Whether process ``pid`` has exited (a zombie not yet reaped counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, IndexError):
        return True


def write_dag(folder: Path, name: str, source: str) -> Path:
    """Write a DAG file (dedented) into ``folder`` and return its path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(textwrap.dedent(source).lstrip())
    return path


def cli_env_in(folder: Path) -> dict[str, str]:
    """Environment for running the CLI in a subprocess with its home, dags folder
    (``folder/dags``), database and data under ``folder``."""
    home = folder / "home"
    return {
        "DAGRUN_HOME": str(home),
        "DAGRUN_DAGS_FOLDER": str(folder / "dags"),
        "DAGRUN_DB_URL": f"sqlite:///{home / 'dagrun.db'}",
        "DAGRUN_DATA": str(folder / "data"),
    }


def dagrun_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "dagrun", *args]


def run_cli(
    *args: str,
    env: dict[str, str],
    cwd: Path | None = None,
    timeout: float = 120,
    input: str | None = None,
) -> subprocess.CompletedProcess:
    """Run ``dagrun ARGS`` as a user would, in a subprocess; returns the completed process."""
    return subprocess.run(
        dagrun_cmd(*args),
        env={**os.environ, **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        input=input,
    )


def run_once(
    store,
    dags_dir: Path,
    dag_id: str,
    *,
    workers: int = 2,
    log_dir: Path | None = None,
    run_id: str = "test-run",
    conf: dict | None = None,
):
    """Sync the dags folder and execute one manual run of ``dag_id`` (with ``conf``)
    in-process to its end.

    Returns (run row, {task_id: task row}). Attempts still run in real child processes.
    """
    from dagrun.runtime.dag_sync import sync_dags
    from dagrun.runtime.driver import RunDriver
    from dagrun.runtime.worker import WorkerOptions
    from dagrun.store import dag_reads, run_reads, runs, task_reads
    from dagrun.timing.timetable import DataInterval

    sync_dags(store, str(dags_dir))
    with store.read() as conn:
        spec = dag_reads.get_dag(conn, dag_id).spec
    first = spec.timetable.next_interval(None)
    with store.write() as conn:
        now = store.now(conn)
        interval = first or DataInterval(now, now)
        pk, _ = runs.create_manual_run(conn, spec, interval, run_id, now, conf)
    options = WorkerOptions(concurrency=workers, log_dir=log_dir or dags_dir.parent / "logs")
    RunDriver(store, spec, [pk], worker_options=options).run()
    with store.read() as conn:
        run = run_reads.run_by_pk(conn, pk)
        tasks = {t.task_id: t for t in task_reads.task_instances(conn, [pk])}
    return run, tasks


def queue_run(store, dags_dir: Path, dag_id: str, run_id: str = "queued-run") -> int:
    """Sync the dags folder and create, admit and start one manual run: its roots are queued."""
    from dagrun.runtime.dag_sync import sync_dags
    from dagrun.store import dag_reads, runs
    from dagrun.timing.timetable import DataInterval

    sync_dags(store, str(dags_dir))
    with store.write() as conn:
        spec = dag_reads.get_dag(conn, dag_id).spec
        now = store.now(conn)
        pk, _ = runs.create_manual_run(conn, spec, DataInterval(now, now), run_id, now)
        runs.admit_runs(conn, spec, 10**6, now, run_pks=[pk])
        runs.start_runs(conn, spec, now)
    return pk


def start_cli(
    *args: str, env: dict[str, str], log: Path, cwd: Path | None = None
) -> subprocess.Popen:
    """Start ``dagrun ARGS`` in the background (own session), output to ``log``."""
    handle = open(log, "ab")  # noqa: SIM115 - the child keeps it
    return subprocess.Popen(
        dagrun_cmd(*args),
        env={**os.environ, **env},
        cwd=cwd,
        stdout=handle,
        stderr=handle,
        start_new_session=True,
    )


def stop_process(process: subprocess.Popen, timeout: float = 30) -> int:
    """SIGTERM, then SIGKILL if it does not exit within ``timeout``; returns the exit code."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
    return process.returncode


def db_rows(env: dict[str, str], query: str) -> list[tuple]:
    """Rows of a SQL query against the database of a CLI environment (any engine)."""
    from sqlalchemy import create_engine, text

    from dagrun.store.location import normalise_url

    engine = create_engine(normalise_url(env["DAGRUN_DB_URL"]))
    try:
        with engine.connect() as conn:
            return [tuple(row) for row in conn.execute(text(query))]
    finally:
        engine.dispose()


def table_counts(env: dict[str, str]) -> dict[str, int]:
    """Rows per table of a CLI environment's database (to prove a command changed nothing)."""
    from sqlalchemy import create_engine, inspect

    from dagrun.store.location import normalise_url

    engine = create_engine(normalise_url(env["DAGRUN_DB_URL"]))
    try:
        tables = inspect(engine).get_table_names()
    finally:
        engine.dispose()
    assert {"dag", "dag_run", "task_instance", "task_attempt", "audit_log"} <= set(tables)
    return {t: db_rows(env, f'SELECT count(*) FROM "{t}"')[0][0] for t in tables}


def cli_json(*args: str, env: dict[str, str], cwd: Path | None = None):
    """The JSON document a ``dagrun ... --json`` command prints (it must exit 0)."""
    import json

    result = run_cli(*args, "--json", env=env, cwd=cwd, timeout=30)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout)


def attempt_request(path: Path, task_id: str, log_dir: Path | None, dag_id: str, **fields):
    """What a worker sends a child for one attempt of ``dag_id.task_id`` in the file at
    ``path`` (a daily interval from 2026-01-05 unless ``logical_date`` says otherwise)."""
    from datetime import UTC, datetime, timedelta

    from dagrun.runtime.requests import AttemptRequest

    start = fields.setdefault("logical_date", datetime(2026, 1, 5, tzinfo=UTC))
    return AttemptRequest(
        dag_id=dag_id,
        task_id=task_id,
        fileloc=str(path),
        timezone="UTC",
        run_id=f"r-{start:%Y%m%d}",
        data_interval_start=start,
        data_interval_end=start + timedelta(days=1),
        log_dir=str(log_dir) if log_dir else None,
        **fields,
    )


def most_at_once(spans) -> int:
    """The most (start, end) spans open at one instant: a sweep over their ends (an end and
    a start at the same instant do not overlap)."""
    events = sorted([(end, -1) for _, end in spans] + [(start, 1) for start, _ in spans])
    most = current = 0
    for _, change in events:
        current += change
        most = max(most, current)
    return most


def attempts_of(store, task_id: str) -> list[dict]:
    """Every attempt row of ``task_id`` (of any DAG), oldest first."""
    from sqlalchemy import select

    from dagrun.store.schema import task_attempt

    with store.read() as conn:
        rows = conn.execute(
            select(task_attempt)
            .where(task_attempt.c.task_id == task_id)
            .order_by(task_attempt.c.id)
        )
        return [dict(r) for r in rows.mappings()]


def log_of(attempt: dict) -> str:
    """An attempt's own range of the log segment its worker child wrote it into."""
    from dagrun.store import logfiles

    return logfiles.read(attempt["log_path"], attempt["log_offset"], attempt["log_length"])[0]


def overwrite_root_page(path: Path, table: str, data: bytes, offset: int = 0) -> None:
    """Write ``data`` at ``offset`` into the root page of ``table`` in the SQLite file at
    ``path``, as a failing disk would: every statement on that table starts there."""
    import sqlite3

    db = sqlite3.connect(path, isolation_level=None)
    try:
        page_size = db.execute("PRAGMA page_size").fetchone()[0]
        query = "SELECT rootpage FROM sqlite_schema WHERE name = ?"
        (root,) = db.execute(query, (table,)).fetchone()
    finally:
        db.close()
    with path.open("r+b") as handle:
        handle.seek((root - 1) * page_size + offset)
        handle.write(data)


#: A one-task TaskFlow DAG that returns "hi": for tests of the pages around a run.
HELLO = """
    from dagrun import DAG, task

    with DAG("hello", schedule=None):
        @task
        def hi():
            return "hi"

        hi()
    """


#: Runs a command in this interpreter, as the console script does, and says what it did
#: beside printing: the forks it made, the statements it sent to SQLite that write (a write
#: transaction's ``BEGIN IMMEDIATE`` among them) and which of the heavy modules (what a
#: parse needs, SQLAlchemy, the statements' declarations) it imported.
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
heavy = (
    "dagrun.parsing.parser",
    "dagrun.parsing.loader",
    "dagrun.authoring",
    "dagrun.store.registry",
    "dagrun.store.queries",
    "dagrun.store.statements",
    "multiprocessing",
    "sqlalchemy",
)
print(json.dumps({
    "code": code,
    "forks": len(forks),
    "writes": [s for s in sent if s.lstrip().upper().startswith(writing)],
    "loaded": [m for m in heavy if m in sys.modules],
}))
"""


def watched(args: list[str], env: dict[str, str], cwd) -> tuple[dict, subprocess.CompletedProcess]:
    """``dagrun ARGS`` run under ``WATCHED``: what it did, and the finished process."""
    done = subprocess.run(
        [sys.executable, "-c", WATCHED, *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["code"] == 0, done.stderr[-2000:]
    return found, done

"""Nothing a child does ends or silences its parent: children that exit, are killed or
segfault by the dozen, a log folder that is full or read-only. Every attempt is recorded
with its real cause, infrastructure causes leave the task's retries alone, and the command
ends with its summary."""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path

import pytest
from sqlalchemy import select

from dagrun.store import Store
from dagrun.store.schema import task_attempt, task_instance
from tests.faults.invariants import check_effects, leftovers, runs_ended, token_env
from tests.helpers import run_cli, wait_until, write_dag

pytestmark = pytest.mark.slow

DAYS = ("--start", "2026-01-01", "--end", "2026-01-20")

# 30 tasks a date; four die on their first try (exit, SIGKILL, segfault, closing every
# file it has, its pipe to the worker included), the rest write their effect. Retries are
# the task's own: the dying ones succeed on their second try.
CRASHY = """
import ctypes, os, signal
from dagrun import DAG, task

with DAG("crashy", schedule="@daily", start_date="2026-01-01", max_active_runs=4,
         default_args={{"retries": 1, "retry_delay": 0.01}}):
    @task
    def work(ctx, try_number):
        kind = ctx.task_id.split("_")[0]
        if try_number == 1 and ctx.ds in {days!r}:
            if kind == "exits":
                os._exit(3)
            if kind == "killed":
                os.kill(os.getpid(), signal.SIGKILL)
            if kind == "segv":
                ctypes.string_at(0)
            if kind == "closes":  # its pipe to the worker, its log, everything
                os.closerange(3, 4096)
        with open({effects!r}, "a") as handle:
            handle.write(f"{{ctx.run_id}}/{{ctx.task_id}}\\n")

    for kind in ["exits", "killed", "segv", "closes"] + ["fine"] * 26:
        work.task_id = kind
        work()
"""


@pytest.fixture
def env(cli_env: dict[str, str], db_url: str) -> dict[str, str]:
    return {**cli_env, "DAGRUN_DB_URL": db_url, **token_env()}


def test_dying_children_never_stop_a_backfill(env, dags_dir, tmp_path, db_url):
    effects = tmp_path / "effects.log"
    crash_days = ["2026-01-03", "2026-01-09", "2026-01-17"]
    write_dag(dags_dir, "crashy.py", CRASHY.format(days=crash_days, effects=str(effects)))
    result = run_cli("backfill", "crashy", *DAYS, "--workers", "2", env=env, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "runs 20 succeeded, 0 failed; tasks 600 success" in result.stdout
    assert "Traceback" not in result.stderr
    replaced = [line for line in result.stderr.splitlines() if "; replaced" in line]
    assert len(replaced) == 12, result.stderr  # one line per dead child, nothing else
    store = Store(db_url)
    try:
        assert runs_ended(store) == {"success": 20}
        assert len(check_effects(store, effects)) == 600
        with store.read() as conn:
            errors = conn.execute(
                select(task_attempt.c.task_id, task_attempt.c.error).where(
                    task_attempt.c.outcome == "crashed"
                )
            ).all()
    finally:
        store.dispose()
    reasons = {task_id.split("_")[0]: error for task_id, error in errors}
    assert "exited with code 3" in reasons["exits"]
    assert "killed by signal 9 (SIGKILL)" in reasons["killed"]
    assert "killed by signal 11 (SIGSEGV)" in reasons["segv"]
    assert "before finishing" in reasons["closes"]
    assert len(errors) == 12
    wait_until(lambda: not leftovers(env), 15, what="every process of the backfill to end")


SIMPLE = """
from dagrun import DAG, task

with DAG("logless", schedule="@daily", start_date="2026-01-01",
         default_args={"retries": 2, "retry_delay": 0.01}):
    @task
    def first():
        print("hello")

    @task
    def second():
        print("world")

    first() >> second()
"""


@contextlib.contextmanager
def mounted(folder: Path, *options: str):
    """A tmpfs mounted on ``folder`` for the block (skips where mounting is not allowed)."""
    folder.mkdir(parents=True, exist_ok=True)
    mount = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", ",".join(options), "tmpfs", str(folder)],
        capture_output=True,
        text=True,
    )
    if mount.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mount.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(folder: Path) -> None:
    """Use up every byte of the filesystem under ``folder``."""
    with contextlib.suppress(OSError), open(folder / "filler", "wb") as handle:
        while True:
            handle.write(b"x" * 4096)
            handle.flush()


def logless_backfill(env: dict[str, str], dags_dir: Path) -> subprocess.CompletedProcess:
    write_dag(dags_dir, "logless.py", SIMPLE)
    days = ("--start", "2026-01-01", "--end", "2026-01-02")
    return run_cli("backfill", "logless", *days, "--workers", "2", env=env, timeout=120)


@pytest.mark.parametrize(
    ("options", "cause"),
    [(("size=64k",), "log folder full: No space left on device"),
     (("ro", "size=64k"), "log folder read-only: Read-only file system")],
)  # fmt: skip
def test_an_unusable_log_folder_fails_tasks_with_the_cause_not_their_retries(
    sqlite_url, cli_env, dags_dir, tmp_path, options, cause
):
    env = {**cli_env, "DAGRUN_DB_URL": sqlite_url, **token_env()}
    with mounted(Path(env["DAGRUN_HOME"]) / "logs", *options) as logs:
        if "ro" not in options:
            fill(logs)
        result = logless_backfill(env, dags_dir)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "runs 0 succeeded, 2 failed" in result.stdout
    assert "Traceback" not in result.stderr
    assert result.stderr.count(cause) == 1, result.stderr  # one line, not one per attempt
    assert "dagrun tasks failed logless" in result.stderr
    store = Store(sqlite_url)
    try:
        with store.read() as conn:
            rows = conn.execute(
                select(
                    task_instance.c.task_id,
                    task_instance.c.state,
                    task_instance.c.failures,
                    task_instance.c.infra_failures,
                    task_instance.c.last_error,
                )
            ).all()
            outcomes = set(conn.execute(select(task_attempt.c.outcome)).scalars())
    finally:
        store.dispose()
    first = [r for r in rows if r.task_id == "first"]
    assert all(r.state == "failed" for r in first)
    assert all(r.failures == 0 and r.infra_failures == 4 for r in first), first  # retries kept
    assert all(r.last_error.startswith(cause) for r in first)
    assert {r.state for r in rows if r.task_id == "second"} == {"upstream_failed"}
    assert outcomes == {"infra_failed"}
    wait_until(lambda: not leftovers(env), 15, what="every process of the backfill to end")

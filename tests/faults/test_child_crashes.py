"""A task that exits, segfaults or hangs fails only its own attempt, with the reason, while
the worker goes on with other tasks (attempts run in real child processes)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from dagrun.store import logfiles
from dagrun.store.schema import task_attempt
from tests.helpers import run_once, write_dag

pytestmark = pytest.mark.slow


def test_exit_segfault_and_timeout_fail_only_their_attempt(sqlite_store, dags_dir, tmp_path):
    write_dag(
        dags_dir,
        "crashy.py",
        f"""
        import ctypes, os, time
        from dagrun import DAG, BashTask, task

        with DAG("crashy", schedule=None):
            @task
            def exits():
                os._exit(3)

            @task
            def segfaults():
                ctypes.string_at(0)

            @task(execution_timeout=1)
            def hangs():
                time.sleep(600)

            hang_bash = BashTask("hangs_bash", command="sleep 600", execution_timeout=1)

            @task
            def fine(n):
                open({str(tmp_path)!r} + f"/fine-{{n}}", "w").write("ok")

            exits(); segfaults(); hangs()
            for n in range(6):
                fine(n)
        """,
    )
    run, tasks = run_once(sqlite_store, dags_dir, "crashy", workers=2, log_dir=tmp_path / "logs")
    assert run.state == "failed"
    errors = {t: tasks[t].last_error for t in ("exits", "segfaults", "hangs", "hangs_bash")}
    assert "exited with code 3" in errors["exits"]
    assert "killed by signal 11 (SIGSEGV)" in errors["segfaults"]
    assert "timed out after 1 s" in errors["hangs"]
    assert "timed out after 1 s" in errors["hangs_bash"]
    fine = [t for t in tasks if t.startswith("fine")]
    assert len(fine) == 6 and all(tasks[t].state == "success" for t in fine)
    assert sorted(p.name for p in tmp_path.glob("fine-*")) == [f"fine-{n}" for n in range(6)]
    with sqlite_store.read() as conn:
        rows = conn.execute(select(task_attempt)).all()
    attempts = {r.task_id: r for r in rows}
    # Attempts waiting in a dead child's inbox went back unstarted: each ran exactly once.
    assert sorted(r.task_id for r in rows) == sorted(tasks)
    outcomes = {task_id: a.outcome for task_id, a in attempts.items()}
    assert outcomes["exits"] == "crashed" and outcomes["segfaults"] == "crashed"
    assert outcomes["hangs"] == "timed_out" and outcomes["hangs_bash"] == "timed_out"
    # The pool records a dead child's log: what it wrote since its last finished attempt.
    for task_id in ("exits", "segfaults", "hangs", "hangs_bash"):
        a = attempts[task_id]
        text = logfiles.read(a.log_path, a.log_offset, a.log_length)[0]
        assert text.count("INFO dagrun.task: attempt 1 of crashy.") == 1, (task_id, text)
        assert f"attempt 1 of crashy.{task_id} " in text, (task_id, text)
    segfault = attempts["segfaults"]
    text = logfiles.read(segfault.log_path, segfault.log_offset, segfault.log_length)[0]
    assert "Fatal Python error: Segmentation fault" in text


def test_timed_out_bash_leaves_no_process_behind(sqlite_store, dags_dir, tmp_path):
    marker = tmp_path / "marker"
    write_dag(
        dags_dir,
        "bashy.py",
        f"""
        from dagrun import DAG, BashTask

        with DAG("bashy", schedule=None):
            BashTask("slow", command="sleep 3 && touch {marker}", execution_timeout=1)
        """,
    )
    _run, tasks = run_once(sqlite_store, dags_dir, "bashy", workers=1)
    assert tasks["slow"].state == "failed"
    assert not processes_mentioning(str(marker)), "the shell outlived its killed attempt"


def processes_mentioning(text: str) -> list[int]:
    """Pids of live processes whose command line contains ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if text in cmdline:
                found.append(int(entry.name))
    return found

"""Worker children: whole messages off a child's pipe however the bytes arrive, which jobs may share
a child's inbox, and what a child that dies leaves behind. Timeouts and crashes under a real
worker are in tests/runtime/test_worker.py and tests/faults/test_child_crashes.py."""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import struct
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path

import pytest

from dagrun.runtime.attempt_pool import AttemptPool, Child, Job, batch, read_frames
from dagrun.states import AttemptOutcome
from dagrun.store import logfiles
from tests.helpers import attempt_request, wait_until, write_dag
from tests.test_processes import gone


def framed(message: object) -> bytes:
    """``message`` as ``Connection.send`` writes it to the pipe."""
    ours, theirs = multiprocessing.Pipe()
    theirs.send(message)
    raw = os.read(ours.fileno(), 1 << 16)  # a small message arrives in one read
    ours.close()
    theirs.close()
    return raw


def test_a_frame_is_taken_only_once_it_is_whole():
    data = framed(("done", 1)) + framed(("done", 2))
    received = bytearray(data[:-1])
    assert read_frames(received) == [("done", 1)]
    assert read_frames(received) == []  # the second one is one byte short
    received += data[-1:]
    assert read_frames(received) == [("done", 2)] and not received


def test_a_huge_frame_uses_the_long_header():
    body = pickle.dumps("abc")
    received = bytearray(struct.pack("!i", -1) + struct.pack("!Q", len(body)) + body)
    assert read_frames(bytearray(received[:11])) == []
    assert read_frames(received) == ["abc"]


def reader_of(conn) -> Child:
    """A Child around one end of a pipe, without forking a process."""
    child = Child.__new__(Child)
    child.conn = conn
    child._received = bytearray()
    return child


def test_messages_split_across_reads_arrive_whole_and_in_order():
    ours, theirs = multiprocessing.Pipe()
    sent = [("done", 1), ("big", "y" * 3_000_000), ("done", 3)]
    writer = threading.Thread(target=lambda: [theirs.send(m) for m in sent])
    writer.start()
    child = reader_of(ours)
    got = []
    while len(got) < len(sent):
        got += child.messages()  # blocks until bytes arrive, takes at most 1 MiB a time
    writer.join(10)
    assert got == sent


def test_a_closed_pipe_is_the_childs_end():
    ours, theirs = multiprocessing.Pipe()
    theirs.close()
    with pytest.raises(EOFError):
        reader_of(ours).messages()


def jobs(*shorts: bool) -> deque[Job]:
    return deque(Job(request=None, timeout=None, payload=i, short=s) for i, s in enumerate(shorts))


def test_known_short_jobs_share_a_message_up_to_the_limit():
    buffer = jobs(True, True, True, True)
    assert [j.payload for j in batch([], buffer, 3)] == [0, 1, 2]
    assert [j.payload for j in buffer] == [3]


def test_nothing_waits_behind_a_long_or_new_task():
    buffer = jobs(False, True, True)
    assert [j.payload for j in batch([], buffer, 8)] == [0]  # an idle child takes it alone
    assert [j.payload for j in batch(list(jobs(False)), jobs(True), 8)] == []  # held: new
    behind_shorts = jobs(True, True, False, True)
    assert [j.payload for j in batch([], behind_shorts, 8)] == [0, 1, 2]  # it goes last


def test_a_child_already_holding_short_jobs_takes_more_within_the_limit():
    assert [j.payload for j in batch(list(jobs(True, True)), jobs(True, True, True), 2)] == [0, 1]
    assert batch(list(jobs(True)), jobs(True), 0) == []


DIES_SECOND = """
    import os
    from dagrun import DAG, task

    with DAG("pool", schedule=None):
        @task
        def quick():
            return 1

        @task
        def dies():
            os._exit(3)

        quick(); dies()
"""


def short_jobs(path: Path, log_dir: Path):
    """``job(n, task_id)``: an attempt of ``pool.<task_id>`` known to be short, payload n."""

    def job(n: int, task_id: str) -> Job:
        return Job(attempt_request(path, task_id, log_dir, "pool"), None, payload=n, short=True)

    return job


def test_a_dead_childs_unstarted_jobs_come_back_and_its_log_is_its_own(dags_dir, tmp_path):
    """One message of four short jobs; the second kills the child. The first has its
    result, the second the crash and the log it wrote, the last two were never started."""
    job = short_jobs(write_dag(dags_dir, "pool_dag.py", DIES_SECOND), tmp_path / "logs")

    pool = AttemptPool(1, str(tmp_path / "logs"))
    try:
        buffer = deque([job(0, "quick"), job(1, "dies"), job(2, "quick"), job(3, "quick")])
        pool.dispatch(buffer, 8)
        assert not buffer and len(pool.jobs()) == 4
        finished = []
        deadline = time.monotonic() + 30
        while len(finished) < 2 and time.monotonic() < deadline:
            finished += pool.collect(1.0)
        results = {j.payload: r for j, r in finished}
        assert results[0].outcome == AttemptOutcome.SUCCESS
        assert results[1].outcome == AttemptOutcome.CRASHED
        assert "exited with code 3" in results[1].error
        crash_log = logfiles.read(results[1].log.path, results[1].log.offset, results[1].log.length)
        assert "attempt 1 of pool.dies" in crash_log[0] and "pool.quick" not in crash_log[0]
        assert [j.payload for j in pool.returned()] == [2, 3]
        assert pool.jobs() == []
    finally:
        pool.close()


OPENS_THE_STORE = """
    from dagrun import DAG, task
    from dagrun.store import dag_reads
    from dagrun.store.engine import shared_store

    with DAG("opens", schedule=None):
        @task
        def opens(ctx):
            with shared_store(ctx.db_url).write() as conn:
                dag_reads.active_dag_ids(conn)

        opens()
"""


def test_children_forked_while_another_thread_uses_the_database_can_open_it(
    dags_dir, tmp_path, sqlite_store
):
    """A fork copies the locks other threads hold (SQLite's own mutexes among them): children
    forked while a thread is inside a transaction must still open the database."""
    path = write_dag(dags_dir, "opens_dag.py", OPENS_THE_STORE)
    stop = threading.Event()

    def hammer() -> None:
        while not stop.is_set():
            with sqlite_store.write() as conn:
                conn.exec_driver_sql("SELECT 1")

    thread = threading.Thread(target=hammer, daemon=True)
    thread.start()
    pools = []
    try:
        for _ in range(10):
            pool = AttemptPool(2, str(tmp_path / "logs"))
            pools.append(pool)
            jobs = [
                Job(attempt_request(path, "opens", None, "opens", db_url=sqlite_store.url), 30)
                for _ in range(2)
            ]
            pool.dispatch(deque(jobs), 1)
            finished = []
            deadline = time.monotonic() + 30
            while len(finished) < 2 and time.monotonic() < deadline:
                finished += pool.collect(1.0)
            outcomes = [result.outcome for _, result in finished]
            assert outcomes == [AttemptOutcome.SUCCESS] * 2, [r.error for _, r in finished]
    finally:
        stop.set()
        thread.join(10)
        for pool in pools:
            pool.close()


def test_a_child_that_died_before_new_work_reached_it_keeps_its_finished_results(
    dags_dir, tmp_path
):
    """The worker hands a child more work just after it died: the send fails, and the
    results the child sent before dying must still count, so the death is put on the
    attempt it died in, not on one it had finished."""
    job = short_jobs(write_dag(dags_dir, "pool_dag.py", DIES_SECOND), tmp_path / "logs")

    pool = AttemptPool(1, str(tmp_path / "logs"))
    try:
        pool.dispatch(deque([job(0, "quick"), job(1, "dies")]), 8)
        child = pool.children[0]
        child.process.join(30)  # it ran "quick", answered, and died in "dies"
        assert child.process.exitcode == 3
        pool.dispatch(deque([job(2, "quick")]), 8)  # too late: the pipe is gone
        assert child.broken
        finished = pool.collect(0)
        results = {j.payload: r for j, r in finished}
        assert results[0].outcome == AttemptOutcome.SUCCESS
        assert results[1].outcome == AttemptOutcome.CRASHED, results[1]
        assert "exited with code 3" in results[1].error
        assert [j.payload for j in pool.returned()] == [2]
    finally:
        pool.close()


IMPORTS_NOTED = """
    import os
    from pathlib import Path

    from dagrun import DAG, task

    with open(Path(__file__).with_suffix(".imports"), "a") as imports:
        imports.write(f"{os.getpid()}\\n")
    print("imported")

    with DAG("noted", schedule=None):
        @task
        def pid():
            return os.getpid()

        pid()
"""


def test_children_import_the_preloaded_file_as_they_start_and_only_then(dags_dir, tmp_path):
    """A driver's children import its DAG file before any attempt reaches them; the
    attempt then finds it imported (one import per child), and the import's output goes
    nowhere (no attempt's log)."""
    path = write_dag(dags_dir, "noted.py", IMPORTS_NOTED)
    imports = path.with_suffix(".imports")
    pool = AttemptPool(2, str(tmp_path / "logs"), preload=[str(path)])
    try:
        children = {c.process.pid for c in pool.children}
        wait_until(lambda: imports.exists() and len(imports.read_text().split()) == 2)
        assert set(map(int, imports.read_text().split())) == children
        buffer = deque([Job(attempt_request(path, "pid", tmp_path / "logs", "noted"), None)])
        pool.dispatch(buffer, 1)
        ((_, result),) = wait_until(lambda: pool.collect(1.0), what="the attempt's end")
        assert result.outcome == AttemptOutcome.SUCCESS and int(result.return_value) in children
        assert len(imports.read_text().split()) == 2  # not imported again
        log = logfiles.read(result.log.path, result.log.offset, result.log.length)[0]
        assert "imported" not in log
    finally:
        pool.close()


def test_a_preloaded_file_that_fails_leaves_its_error_to_the_attempt(dags_dir, tmp_path):
    path = write_dag(dags_dir, "broken.py", "raise RuntimeError('not today')\n")
    pool = AttemptPool(1, str(tmp_path / "logs"), preload=[str(path)])
    try:
        buffer = deque([Job(attempt_request(path, "any", tmp_path / "logs", "broken"), None)])
        pool.dispatch(buffer, 1)
        ((_, result),) = wait_until(lambda: pool.collect(1.0), what="the attempt's end")
        assert result.outcome == AttemptOutcome.FAILED and "not today" in result.error
        assert pool.children[0].process.is_alive()
    finally:
        pool.close()


RUNNERS_WHERE = """
import json, sys, threading
from collections import deque
from dagrun.runtime.attempt_pool import AttemptPool, Job
from tests.helpers import attempt_request, wait_until

threaded = sys.argv[1] == "threaded"
stop = threading.Event()
if threaded:
    threading.Thread(target=stop.wait, daemon=True).start()
pool = AttemptPool(1, sys.argv[3])
in_parent = "dagrun.runtime.runner" in sys.modules
request = attempt_request(sys.argv[2], "pid", sys.argv[3], "noted")
pool.dispatch(deque([Job(request, None)]), 1)
((_, result),) = wait_until(lambda: pool.collect(1.0), what="the attempt's end")
pool.close()
stop.set()
print(json.dumps([in_parent, result.outcome.value]))
"""


@pytest.mark.parametrize("threads, in_parent", [("alone", False), ("threaded", True)])
def test_the_runners_are_imported_by_a_child_forked_alone_else_by_its_worker_first(
    dags_dir, tmp_path, threads, in_parent
):
    """A worker with no other thread forks children that import what runs an attempt
    themselves (beside the worker's own start); a worker with other threads imports it
    before forking, since a child importing after the fork could wait forever on a module
    lock another thread held at that moment. Either way the attempt runs."""
    path = write_dag(dags_dir, "noted.py", IMPORTS_NOTED)
    args = [threads, str(path), str(tmp_path / "logs")]
    done = subprocess.run(
        [sys.executable, "-c", RUNNERS_WHERE, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert json.loads(done.stdout.splitlines()[-1]) == [in_parent, "success"], done.stderr


def test_a_worker_importing_the_runners_holds_the_forks_of_its_other_threads_off(monkeypatch):
    """A scheduler's thread forks parse children while its workers' threads start: a fork
    in the middle of the runners' import would leave the child a module lock held for good
    (its own import of the authoring API would then wait forever)."""
    from dagrun import processes
    from dagrun.runtime import attempt_pool

    importing, imported = threading.Event(), threading.Event()

    def slow_import() -> None:
        importing.set()
        imported.wait(10)

    monkeypatch.setattr(attempt_pool, "load_runners", slow_import)
    monkeypatch.setattr(processes.ForkedChild, "__init__", lambda self, *args, **kwargs: None)
    starter = threading.Thread(target=Child)  # a worker's thread, beside this one
    starter.start()
    assert importing.wait(10)
    forked = threading.Event()

    def fork() -> None:
        with processes.FORK_GUARD.forking():
            forked.set()

    forker = threading.Thread(target=fork)
    forker.start()
    assert not forked.wait(0.5)  # held off while the import runs
    imported.set()
    assert forked.wait(10)
    starter.join(10)
    forker.join(10)


FORKED_AHEAD = """
from dagrun import processes

processes.end_without_teardown().code = 0  # as the dagrun program ends, before any import

from dagrun.runtime import attempt_pool

attempt_pool.prefork()
print(attempt_pool._spares[0].process.pid, flush=True)
"""


def test_a_child_forked_ahead_that_no_pool_took_is_killed_as_the_command_ends():
    """A ``run`` that finds nothing to do never makes a pool: its child forked ahead (which
    ignores the SIGTERM multiprocessing ends children with) must not hold the exit up."""
    done = subprocess.run(
        [sys.executable, "-c", FORKED_AHEAD], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    pid = int(done.stdout.split()[0])
    wait_until(lambda: gone(pid), 10, what="its end")


TAKEN = """
import json, sys
from collections import deque
from pathlib import Path
from dagrun.runtime import attempt_pool
from tests.helpers import attempt_request, wait_until

attempt_pool.prefork()
ahead = attempt_pool._spares[0].process.pid
imports = Path(sys.argv[1]).with_suffix(".imports")
pool = attempt_pool.AttemptPool(1, sys.argv[2], preload=[sys.argv[1]])
taken = pool.children[0].process.pid
wait_until(lambda: imports.exists() and imports.read_text().split(), what="the preload")
request = attempt_request(sys.argv[1], "pid", sys.argv[2], "noted")
pool.dispatch(deque([attempt_pool.Job(request, None)]), 1)
((_, result),) = wait_until(lambda: pool.collect(1.0), what="the attempt's end")
pool.close()
print(json.dumps([ahead, taken, imports.read_text().split(), result.return_value]))
"""


def test_the_first_pool_takes_the_child_forked_ahead_and_has_it_import_the_dag_file(
    dags_dir, tmp_path
):
    path = write_dag(dags_dir, "noted.py", IMPORTS_NOTED)
    done = subprocess.run(
        [sys.executable, "-c", TAKEN, str(path), str(tmp_path / "logs")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    ahead, taken, imported_by, ran_in = json.loads(done.stdout.splitlines()[-1])
    assert taken == ahead, done.stderr
    assert imported_by == [str(ahead)]  # once, by the child, before the attempt
    assert int(ran_in) == ahead

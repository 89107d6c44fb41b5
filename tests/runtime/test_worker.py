"""The worker end to end in-process (attempts in real child processes): retries, dead
letters, trigger rules, TaskFlow values, templates, context, logs."""

from __future__ import annotations

import contextlib
import logging
import threading
import time

import pytest
from sqlalchemy import select

from dagrun.runtime.dag_sync import sync_dags
from dagrun.runtime.driver import RunDriver
from dagrun.runtime.worker import Worker, WorkerOptions
from dagrun.store import dag_reads, run_reads, runs, sql, task_reads
from dagrun.store.schema import dag_run, task_instance
from dagrun.timing.timetable import DataInterval
from tests.helpers import (
    attempts_of,
    log_of,
    queue_run,
    run_cli,
    run_once,
    start_cli,
    stop_process,
    wait_until,
    write_dag,
)


@pytest.mark.slow
def test_retries_until_success_then_downstream_runs(store, dags_dir, tmp_path):
    write_dag(
        dags_dir,
        "flaky.py",
        f"""
        from dagrun import DAG, task

        with DAG("flaky", schedule=None, default_args={{"retry_delay": 0.01}}):
            @task(retries=3)
            def flaky(try_number):
                if try_number < 3:
                    raise ConnectionError(f"blip {{try_number}}")
                return try_number

            @task
            def after(value):
                open({str(tmp_path / "after.txt")!r}, "w").write(str(value))

            after(flaky())
        """,
    )
    run, tasks = run_once(store, dags_dir, "flaky")
    assert run.state == "success"
    assert tasks["flaky"].try_number == 3
    outcomes = [a["outcome"] for a in attempts_of(store, "flaky")]
    assert outcomes == ["failed", "failed", "success"]
    assert "ConnectionError: blip 1" in attempts_of(store, "flaky")[0]["error"]
    assert (tmp_path / "after.txt").read_text() == "3"


def test_non_retryable_error_fails_at_once_and_is_a_dead_letter(store, dags_dir):
    write_dag(
        dags_dir,
        "bad.py",
        """
        from dagrun import DAG, task, NonRetryableError

        with DAG("bad", schedule=None):
            @task(retries=5, retry_delay=0.01)
            def reject():
                raise NonRetryableError("HTTP 404 for customer feed")

            @task
            def downstream():
                return 1

            @task(trigger_rule="all_done")
            def cleanup():
                return "cleaned"

            reject() >> downstream() >> cleanup()
        """,
    )
    run, tasks = run_once(store, dags_dir, "bad")
    assert run.state == "failed"
    assert tasks["reject"].state == "failed" and tasks["reject"].try_number == 1
    assert tasks["downstream"].state == "upstream_failed"
    assert tasks["cleanup"].state == "success"
    with store.read() as conn:
        dead = task_reads.dead_letters(conn, "bad")
    assert [(d.task_id, d.try_number) for d in dead] == [("reject", 1)]
    assert dead[0].error == "NonRetryableError: HTTP 404 for customer feed"


def test_a_task_that_raises_skip_task_is_skipped_at_once_and_downstream_follows_its_rule(
    store, dags_dir
):
    write_dag(
        dags_dir,
        "skips.py",
        """
        from dagrun import DAG, SkipTask, task

        with DAG("skips", schedule=None):
            @task(retries=3, retry_delay=0.01)
            def nothing_new(ds):
                raise SkipTask(f"no new files for {ds}")

            @task
            def load():
                return 1

            @task(trigger_rule="none_failed")
            def report():
                return "reported"

            nothing_new() >> load() >> report()
        """,
    )
    run, tasks = run_once(store, dags_dir, "skips")
    assert run.state == "success"
    assert (tasks["nothing_new"].state, tasks["nothing_new"].try_number) == ("skipped", 1)
    assert tasks["nothing_new"].last_error.startswith("SkipTask: no new files for ")
    assert tasks["load"].state == "skipped"
    assert tasks["report"].state == "success"
    assert [a["outcome"] for a in attempts_of(store, "nothing_new")] == ["skipped"]
    with store.read() as conn:
        assert task_reads.dead_letters(conn, "skips") == []


@pytest.mark.slow
def test_retries_exhausted_becomes_dead_letter_with_last_error(store, dags_dir):
    write_dag(
        dags_dir,
        "always.py",
        """
        from dagrun import DAG, task

        with DAG("always", schedule=None):
            @task(retries=2, retry_delay=0.01)
            def boom(try_number):
                raise ValueError(f"bad row in try {try_number}")

            boom()
        """,
    )
    run, tasks = run_once(store, dags_dir, "always")
    assert run.state == "failed"
    assert tasks["boom"].try_number == 3
    with store.read() as conn:
        dead = task_reads.dead_letters(conn)
    assert dead[0].error == "ValueError: bad row in try 3"


def test_bash_templates_environment_and_context(store, dags_dir, tmp_path):
    out = tmp_path / "out"
    write_dag(
        dags_dir,
        "bash.py",
        f"""
        from dagrun import DAG, BashTask, task

        with DAG("bash", schedule="@daily", start_date="2026-01-05", timezone="Asia/Dhaka"):
            BashTask("echo", command="echo {{{{ ds }}}} $DS $FOO > {out}/bash.txt",
                     env={{"FOO": "{{{{ ds_nodash }}}}"}})

            @task
            def ctx_task(ctx, ds, data_interval_end):
                open("{out}/ctx.txt", "w").write(
                    f"{{ds}}|{{data_interval_end.isoformat()}}|{{ctx.idempotency_key}}|"
                    f"{{ctx.fence_token}}")

            ctx_task()
        """,
    )
    out.mkdir()
    run, _ = run_once(store, dags_dir, "bash")
    assert run.state == "success"
    assert (out / "bash.txt").read_text().strip() == "2026-01-05 2026-01-05 20260105"
    ds, end, key, fence = (out / "ctx.txt").read_text().split("|")
    assert ds == "2026-01-05"
    assert end == "2026-01-06T00:00:00+06:00"
    assert key == "bash/ctx_task/2026-01-05T00:00:00+06:00"
    assert int(fence) >= 1


def test_each_attempt_has_its_own_log_file(store, dags_dir, tmp_path):
    write_dag(
        dags_dir,
        "logs.py",
        """
        import logging
        from dagrun import DAG, task

        with DAG("logs", schedule=None):
            @task(retries=1, retry_delay=0.01)
            def chatty(try_number):
                print(f"stdout line {try_number}")
                logging.getLogger("user").warning("logged line %s", try_number)
                if try_number == 1:
                    raise RuntimeError("first try fails")

            chatty()
        """,
    )
    run, _ = run_once(store, dags_dir, "logs", log_dir=tmp_path / "logs")
    assert run.state == "success"
    attempts = attempts_of(store, "chatty")
    assert len(attempts) == 2
    first, second = (log_of(a) for a in attempts)
    assert "stdout line 1" in first and "logged line 1" in first and "RuntimeError" in first
    assert "stdout line 2" in second and "first try fails" not in second


def test_worker_console_logging_is_not_copied_into_attempt_logs(store, dags_dir, tmp_path):
    """``dagrun worker`` logs to the console before it forks its children; an attempt's
    log must still hold each of the task's lines once."""
    write_dag(
        dags_dir,
        "once.py",
        """
        import logging
        from dagrun import DAG, task

        with DAG("once", schedule=None):
            @task
            def say():
                logging.getLogger("user").warning("said once")

            say()
        """,
    )
    stderr = open(2, "w", closefd=False)  # noqa: SIM115 - the real fd 2, as a console has
    console = logging.StreamHandler(stderr)
    logging.getLogger().addHandler(console)
    try:
        run, _ = run_once(store, dags_dir, "once", log_dir=tmp_path / "logs")
    finally:
        logging.getLogger().removeHandler(console)
        stderr.close()
    assert run.state == "success"
    (attempt,) = attempts_of(store, "say")
    assert log_of(attempt).count("said once") == 1


def test_same_named_helpers_in_two_folders_stay_apart(sqlite_store, dags_dir):
    for team in TEAMS:
        write_dag(dags_dir / team, "utils.py", f'VALUE = "{team}"\n')
        write_dag(
            dags_dir / team,
            f"{team}_dag.py",
            f"""
            from dagrun import DAG, task

            with DAG("{team}", schedule=None):
                @task
                def which():
                    import utils

                    return utils.VALUE

                which()
            """,
        )
    runs = {team: queue_run(sqlite_store, dags_dir, team, run_id=f"r-{team}") for team in TEAMS}
    options = WorkerOptions(concurrency=1, log_dir=dags_dir.parent / "logs")

    def stop_when_done(conn, _completion, _now) -> None:
        if run_reads.all_finished(conn, list(runs.values())):
            worker.stop()

    worker = Worker(sqlite_store, options, on_commit=stop_when_done)
    worker.run()
    with sqlite_store.read() as conn:
        values = dict(
            conn.execute(select(task_instance.c.dag_id, task_instance.c.return_value)).all()
        )
    assert values == {"alpha": '"alpha"', "beta": '"beta"'}


TEAMS = ("alpha", "beta")


def run_state_of(store, dag_id: str) -> str | None:
    with store.read() as conn:
        return conn.execute(select(dag_run.c.state).where(dag_run.c.dag_id == dag_id)).scalar()


def test_an_idle_worker_hears_work_queued_elsewhere_on_postgresql(store, dags_dir, tmp_path):
    """Its poll is 30 s; the run queued by another process is done well before that,
    because the queueing transaction NOTIFYs the worker's listening connection."""
    if store.dialect != "postgresql":
        assert store.listen() is None  # SQLite workers poll
        return
    write_dag(
        dags_dir,
        "heard.py",
        """
        from dagrun import DAG, task

        with DAG("heard", schedule=None):
            @task
            def ping():
                return "pong"

            ping()
        """,
    )
    env = {"DAGRUN_DB_URL": store.url, "DAGRUN_HOME": str(tmp_path / "home")}
    log = tmp_path / "worker.log"
    worker = start_cli("worker", "-c", "1", "--poll", "30", env=env, log=log)
    try:
        wait_until(lambda: "started with" in log.read_text(), timeout=30, what="worker start")
        queue_run(store, dags_dir, "heard")
        wait_until(
            lambda: run_state_of(store, "heard") in ("success", "failed"),
            timeout=15,
            what="the run, long before the worker's next poll",
        )
        assert run_state_of(store, "heard") == "success"
    finally:
        assert stop_process(worker) == 0


def test_a_dag_whose_file_broke_runs_its_last_good_version(store, dags_dir, tmp_path):
    """The scheduler keeps the last good spec of a file that fails now; its attempts run
    the file's last good source, and say so in their log."""
    marker = tmp_path / "ran.txt"
    good = f"""
        from dagrun import DAG, task

        with DAG("steady", schedule=None):
            @task
            def work():
                open({str(marker)!r}, "w").write("good version")

            work()
        """
    path = write_dag(dags_dir, "steady.py", good)
    sync_dags(store, str(dags_dir))
    path.write_text(path.read_text() + "\nraise RuntimeError('half-finished edit')\n")
    run, tasks = run_once(store, dags_dir, "steady", log_dir=tmp_path / "logs")
    assert run.state == "success", tasks["work"].last_error
    assert marker.read_text() == "good version"
    (attempt,) = attempts_of(store, "work")
    assert "fails (RuntimeError: half-finished edit); running its last good version" in log_of(
        attempt
    )


@pytest.mark.slow
def test_a_new_worker_claims_only_what_its_children_can_start(sqlite_store, dags_dir, tmp_path):
    """A worker that has not yet seen how long tasks take holds one claim per child: a
    fresh ``-c 1`` worker never sits on queued work another worker could start."""
    write_dag(
        dags_dir,
        "four.py",
        """
        import time
        from dagrun import DAG, task

        with DAG("four", schedule=None):
            @task
            def nap():
                time.sleep(0.5)

            for _ in range(4):
                nap()
        """,
    )
    queue_run(sqlite_store, dags_dir, "four")
    env = {"DAGRUN_DB_URL": sqlite_store.url, "DAGRUN_HOME": str(tmp_path / "home")}
    worker = start_cli("worker", "-c", "1", "--poll", "0.1", env=env, log=tmp_path / "w.log")
    held = []

    def done() -> bool:
        with sqlite_store.read() as conn:
            states = conn.execute(select(task_instance.c.state)).scalars().all()
        held.append(states.count("running"))
        return states == ["success"] * 4

    try:
        wait_until(done, 60, interval=0.02, what="the four tasks")
    finally:
        stop_process(worker)
    assert max(held) == 1, held


def test_a_worker_keeps_no_facts_of_runs_that_ended(sqlite_store, dags_dir, tmp_path):
    """What claims need of a run (id, dates, conf) is cached while the run goes, and
    dropped when it ends: a backfill of years, or a scheduler's worker running for months,
    holds only its running runs in memory."""
    write_dag(
        dags_dir,
        "many.py",
        """
        from dagrun import DAG, task

        with DAG("many", schedule=None, max_active_runs=4):
            @task
            def only():
                return None

            only()
        """,
    )
    sync_dags(sqlite_store, str(dags_dir))
    with sqlite_store.write() as conn:
        spec = dag_reads.get_dag(conn, "many").spec
        now = sqlite_store.now(conn)
        pks = [
            runs.create_manual_run(conn, spec, DataInterval(now, now), f"r{i}", now)[0]
            for i in range(12)
        ]
    options = WorkerOptions(concurrency=2, log_dir=tmp_path / "logs")
    driver = RunDriver(sqlite_store, spec, pks, worker_options=options)
    result = driver.run()
    assert result.worker.finished_runs == 12
    assert driver.worker._runs == {}


# ---------------------------------------------------------------- exits of its own

FIVE = """
import time
from dagrun import DAG, task

with DAG("five", schedule=None):
    nap = task(task_id="nap")(lambda: time.sleep({nap}))
    for _ in range(3):
        nap()

    @task
    def second(value):
        return value + 1

    second(task(task_id="first")(lambda: 1)())
"""


def task_states(store) -> list[str]:
    with store.read() as conn:
        return sorted(conn.execute(select(task_instance.c.state)).scalars())


def run_to_its_exit(store, tmp_path, limit: float = 60, **exits) -> tuple[float, object]:
    """Run an in-process worker until it exits of itself; past ``limit`` seconds a watchdog
    stops it, and the test fails."""
    options = WorkerOptions(
        concurrency=2, log_dir=tmp_path / "logs", poll_interval=0.1, grace=1, **exits
    )
    worker = Worker(store, options)
    watchdog = threading.Timer(limit, worker.stop)
    started = time.monotonic()
    watchdog.start()
    try:
        stats = worker.run()
    finally:
        watchdog.cancel()
    seconds = time.monotonic() - started
    assert seconds < limit, "the worker did not exit of itself"
    return seconds, stats


def test_once_runs_what_is_ready_and_what_that_makes_ready_then_exits(
    sqlite_store, dags_dir, tmp_path
):
    write_dag(dags_dir, "five.py", FIVE.format(nap=0.1))
    queue_run(sqlite_store, dags_dir, "five")
    _seconds, stats = run_to_its_exit(sqlite_store, tmp_path, once=True)
    assert task_states(sqlite_store) == ["success"] * 5  # ``second`` was queued by ``first``
    assert stats.claimed == 5 and stats.released == 0
    assert run_state_of(sqlite_store, "five") == "success"


def test_once_with_nothing_queued_exits_at_once(sqlite_store, tmp_path):
    seconds, stats = run_to_its_exit(sqlite_store, tmp_path, limit=20, once=True)
    assert stats.claimed == 0
    assert seconds < 10


def test_max_tasks_claims_no_more_and_exits_when_they_ended(sqlite_store, dags_dir, tmp_path):
    write_dag(dags_dir, "five.py", FIVE.format(nap=0.1))
    queue_run(sqlite_store, dags_dir, "five")  # four roots queued: first and three naps
    _seconds, stats = run_to_its_exit(sqlite_store, tmp_path, max_tasks=3)
    assert stats.claimed == 3 and stats.succeeded == 3 and stats.released == 0
    states = task_states(sqlite_store)
    assert states.count("success") == 3 and "running" not in states


@pytest.mark.slow
def test_max_idle_counts_only_time_with_nothing_to_run(sqlite_store, dags_dir, tmp_path):
    """The naps keep the worker busy for a second: it must not count that as idle."""
    write_dag(dags_dir, "five.py", FIVE.format(nap=1.0))
    queue_run(sqlite_store, dags_dir, "five")
    seconds, stats = run_to_its_exit(sqlite_store, tmp_path, max_idle=0.5)
    assert task_states(sqlite_store) == ["success"] * 5
    assert stats.released == 0
    assert seconds >= 1.0 + 0.5


def test_max_idle_exits_an_idle_worker(sqlite_store, tmp_path):
    seconds, stats = run_to_its_exit(sqlite_store, tmp_path, limit=20, max_idle=0.5)
    assert stats.claimed == 0
    assert 0.5 <= seconds < 10


@pytest.mark.slow
def test_worker_exits_from_the_command_line(sqlite_store, dags_dir, tmp_path):
    """``--max-tasks`` then ``--once``: each exits 0 of itself, and between them they ran
    every task once."""
    write_dag(dags_dir, "five.py", FIVE.format(nap=0.1))
    queue_run(sqlite_store, dags_dir, "five")
    env = {"DAGRUN_DB_URL": sqlite_store.url, "DAGRUN_HOME": str(tmp_path / "home")}
    first = run_cli("worker", "-c", "1", "--poll", "0.1", "--max-tasks", "2", env=env, timeout=60)
    assert first.returncode == 0, first.stderr
    assert "exits: 2 attempt(s) run (max_tasks)" in first.stderr
    assert task_states(sqlite_store).count("success") == 2
    rest = run_cli("worker", "-c", "2", "--poll", "0.1", "--once", env=env, timeout=60)
    assert rest.returncode == 0, rest.stderr
    assert "exits: nothing left to run (once)" in rest.stderr
    assert task_states(sqlite_store) == ["success"] * 5
    idle = run_cli("worker", "-c", "1", "--poll", "0.1", "--max-idle", "0.3", env=env, timeout=60)
    assert idle.returncode == 0, idle.stderr
    assert "nothing to run for 0.3 s (max_idle)" in idle.stderr


def test_xcoms_pushed_and_pulled_in_callables_and_templates(store, dags_dir, tmp_path):
    """``ti.xcom_push`` keeps a value with the attempt and its completion writes it; a
    later task pulls it (and return values) by parameter or in a template."""
    out = tmp_path / "pulled.txt"
    write_dag(
        dags_dir,
        "pushes.py",
        f"""
        from dagrun import DAG, BashTask, task

        with DAG("pushes", schedule=None):
            @task
            def produce(ti):
                ti.xcom_push(key="rows", value=[1, 2, 3])
                return {{"file": "a.csv"}}

            @task
            def each(x):
                return x * 10

            @task
            def consume(ti=None):
                pushed = ti.xcom_pull(task_ids="produce", key="rows")
                returned = ti.xcom_pull(task_ids="produce")
                mapped = ti.xcom_pull(task_ids="each")
                one = ti.xcom_pull(task_ids="each", map_indexes=1)
                both = ti.xcom_pull(task_ids=["produce", "missing"], default="none")
                return [pushed, returned, mapped, one, both]

            show = BashTask(
                "show",
                command="echo {{{{ ti.xcom_pull(task_ids='produce', key='rows') | sum }}}} "
                "{{{{ task_instance_key_str }}}} > {out}",
            )
            produce() >> each.expand(x=[1, 2]) >> consume() >> show
        """,
    )
    run, tasks = run_once(store, dags_dir, "pushes")
    assert run.state == "success", {t: r.last_error for t, r in tasks.items()}
    with store.read() as conn:
        (consumed,) = conn.exec_driver_sql(
            "SELECT return_value FROM task_instance WHERE task_id = 'consume'"
        ).one()
    assert consumed == '[[1, 2, 3], {"file": "a.csv"}, [10, 20], 20, [{"file": "a.csv"}, "none"]]'
    assert out.read_text().split() == ["6", f"pushes__show__{run.logical_date:%Y%m%d}"]
    with store.read() as conn:
        rows = conn.exec_driver_sql("SELECT task_id, map_index, key, value FROM xcom").all()
    assert [tuple(r) for r in rows] == [("produce", -1, "rows", "[1, 2, 3]")]


def test_a_bash_task_skips_on_its_exit_codes_returns_its_last_line_and_can_drop_the_env(
    store, dags_dir, monkeypatch
):
    monkeypatch.setenv("WORKER_ONLY", "inherited")
    write_dag(
        dags_dir,
        "shells.py",
        """
        from dagrun import DAG, BashTask

        with DAG("shells", schedule=None):
            BashTask("skips", command="exit 99", skip_on_exit_code=99)
            BashTask("fails", command="exit 98", skip_on_exit_code=[99, 100])
            BashTask(
                "last",
                command="echo first; echo ${WORKER_ONLY:-unset} {{ ds_nodash }} $OWN",
                return_last_line=True,
                env={"OWN": "own"},
            )
            BashTask(
                "bare",
                command="echo ${WORKER_ONLY:-unset} $OWN $DAG_ID",
                return_last_line=True,
                env={"OWN": "own"},
                append_env=False,
            )
        """,
    )
    run, tasks = run_once(store, dags_dir, "shells")
    assert {t: r.state for t, r in tasks.items()} == {
        "skips": "skipped",
        "fails": "failed",
        "last": "success",
        "bare": "success",
    }
    assert tasks["skips"].last_error == "SkipTask: command exited with 99 (skip_on_exit_code)"
    with store.read() as conn:
        values = dict(
            conn.exec_driver_sql(
                "SELECT task_id, return_value FROM task_instance WHERE task_id IN ('last', 'bare')"
            ).all()
        )
    assert values == {
        "last": f'"inherited {run.logical_date:%Y%m%d} own"',
        "bare": '"unset own shells"',
    }


CHAIN = """
from dagrun import DAG, PythonTask

def noop():
    return None

with DAG("chain", schedule=None):
    previous = None
    for i in range({length}):
        current = PythonTask(f"t{{i:02d}}", noop)
        if previous is not None:
            previous >> current
        previous = current
"""


class WriteTransactions:
    """The statements of every write transaction a store committed, with the thread that
    ran it: a worker's commits told apart by what they did, not timed."""

    def __init__(self, store) -> None:
        self.committed: list[tuple[str, list[str]]] = []
        self._write = store.write
        self._open = threading.local()

    @contextlib.contextmanager
    def write(self):
        with self._write() as conn:
            self._open.statements = statements = []
            try:
                yield conn
            finally:
                self._open.statements = None
        self.committed.append((threading.current_thread().name, statements))

    def observe(self, statement: str, _params, _seconds) -> None:
        statements = getattr(self._open, "statements", None)
        if statements is not None:
            statements.append(" ".join(statement.split()))


def test_a_chained_task_costs_one_commit_that_ends_it_and_claims_the_next(
    store, dags_dir, tmp_path, monkeypatch
):
    """The commit that records task N's outcome queues task N+1 and claims it: no commit
    of its own for the claim, nor an empty one woken by that commit's own notification on
    PostgreSQL. The claimed attempt goes to a child at once: the worker polls once a
    minute, and a chain that waited for polls would reach the watchdog's bound."""
    length = 12
    write_dag(dags_dir, "chain.py", CHAIN.format(length=length))
    sync_dags(store, str(dags_dir))
    with store.write() as conn:
        spec = dag_reads.get_dag(conn, "chain").spec
        now = store.now(conn)
        pk, _ = runs.create_manual_run(conn, spec, DataInterval(now, now), "chained", now)
    options = WorkerOptions(concurrency=2, log_dir=tmp_path / "logs", poll_interval=60)
    driver = RunDriver(store, spec, [pk], worker_options=options)
    recorder = WriteTransactions(store)
    monkeypatch.setattr(store, "write", recorder.write)
    watchdog = threading.Timer(50, driver.stop)
    watchdog.start()
    try:
        with sql.observed(recorder.observe):
            result = driver.run()
    finally:
        watchdog.cancel()
    assert not result.interrupted and result.runs == {"success": 1}
    mine = threading.current_thread().name  # the worker's loop: other threads lease, look
    commits = [statements for thread, statements in recorder.committed if thread == mine]
    ended = [i for i, c in enumerate(commits) if any(_ends_attempt(s) for s in c)]
    claimed = [i for i, c in enumerate(commits) if any(_opens_attempt(s) for s in c)]
    assert len(ended) == len(claimed) == length
    assert claimed[1:] == ended[:-1]  # task N ended where task N + 1 was claimed
    assert ended[-1] - claimed[0] == length  # and no commit between them did anything else


def _ends_attempt(statement: str) -> bool:
    return statement.startswith("UPDATE task_attempt SET ended_at")


def _opens_attempt(statement: str) -> bool:
    return statement.startswith("INSERT INTO task_attempt")

"""Hosts whose clocks are wrong, under libfaketime: the database's clock decides what is
due on PostgreSQL, and on SQLite a clock stepped back makes no run twice and re-runs nothing."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.helpers import dagrun_cmd, db_rows, run_cli, stop_process, wait_until, write_dag

pytestmark = pytest.mark.slow

#: libfaketime's plain build: its thread-safe one holds a lock that a process forked while
#: another thread reads the clock inherits held (the worker's attempt children hang).
LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"

HOURLY = """
    from dagrun import DAG, BashTask

    with DAG("hourly", schedule="@hourly", start_date="{start}", catchup=True):
        BashTask("t", command="echo")
"""


def _faketime_works() -> bool:
    if shutil.which("faketime") is None or not os.path.exists(LIBFAKETIME):
        return False
    shown = subprocess.run(
        ["faketime", "-f", "+10d", "date", "+%s"], capture_output=True, text=True
    )
    return shown.returncode == 0 and int(shown.stdout) - datetime.now(UTC).timestamp() > 86400


needs_faketime = pytest.mark.skipif(
    not _faketime_works(), reason="libfaketime (Debian's faketime package) cannot be loaded here"
)


def start_skewed(
    clock: dict[str, str], *args: str, env: dict[str, str], log: Path
) -> subprocess.Popen:
    """``dagrun ARGS`` in the background with libfaketime preloaded (``clock``: its settings).
    Monotonic time stays real, as it does on a host whose wall clock is off."""
    handle = open(log, "ab")  # noqa: SIM115 - the child keeps it
    fake = {**FAKED, **clock}
    return subprocess.Popen(
        dagrun_cmd(*args),
        env={**os.environ, **env, **fake},
        stdout=handle,
        stderr=handle,
        start_new_session=True,
    )


#: libfaketime preloaded with the monotonic clock left real, as on a host whose wall clock
#: is off (Python's time.sleep fails under this setting; dagrun's loops wait on events).
FAKED = {"LD_PRELOAD": LIBFAKETIME, "FAKETIME_DONT_FAKE_MONOTONIC": "1", "PYTHONFAULTHANDLER": "1"}


def shifted(offset: str) -> dict[str, str]:
    return {"FAKETIME": offset}


def skewed_scheduler(
    clock: dict[str, str], workers: int, env: dict[str, str], log: Path
) -> subprocess.Popen:
    """``dagrun scheduler`` ticking every 0.2 s with ``workers`` embedded workers, under
    libfaketime's ``clock``, once it has begun its first tick (``started``)."""
    args = ("scheduler", "--workers", str(workers), "--poll", "0.2")
    return started(lambda: start_skewed(clock, *args, env=env, log=log), log, "dags folder")


def started(start: Callable[[], subprocess.Popen], log: Path, sign: str) -> subprocess.Popen:
    """A process from ``start`` once ``sign`` is in its log. libfaketime, preloaded into a
    threaded program, now and then stalls one at its start, inside the library, before it
    does anything of its own (seen about once in twenty starts here): such a process is
    stopped (its stacks written to the log: ``PYTHONFAULTHANDLER``) and started again, at
    most twice. What the test checks begins after this."""
    for _ in range(3):
        process = start()
        try:
            wait_until(lambda: sign in log.read_text(), timeout=15, what=f"{sign!r} in {log}")
            return process
        except AssertionError:
            os.killpg(process.pid, signal.SIGABRT)  # its threads' stacks go to the log
            stop_process(process)
    raise AssertionError(f"{log.name}: no {sign!r} in three starts under libfaketime")


@pytest.fixture
def pg_env(pg_url, dags_dir: Path, tmp_path: Path) -> dict[str, str]:
    """A CLI environment on a PostgreSQL schema of its own, its tables made."""
    env = {
        "DAGRUN_HOME": str(tmp_path / "home"),
        "DAGRUN_DAGS_FOLDER": str(dags_dir),
        "DAGRUN_DB_URL": pg_url,
        "DAGRUN_DATA": str(tmp_path / "data"),
    }
    assert run_cli("db", "init", env=env).returncode == 0
    return env


def db_now(env: dict[str, str]) -> datetime:
    return db_rows(env, "SELECT now()")[0][0]


def hourly_dag(dags_dir: Path, hours_back: int) -> None:
    start = (datetime.now(UTC) - timedelta(hours=hours_back)).replace(
        minute=0, second=0, microsecond=0
    )
    write_dag(dags_dir, "hourly.py", HOURLY.format(start=start.strftime("%Y-%m-%dT%H:%M:%S+00:00")))


def interval_ends(env: dict[str, str]) -> list[datetime]:
    return [r[0] for r in db_rows(env, "SELECT data_interval_end FROM dag_run ORDER BY 1")]


def due_ends(env: dict[str, str], start: datetime) -> list[datetime]:
    """The interval ends an hourly DAG from ``start`` has due by the database's clock."""
    now = db_now(env)
    ends, end = [], start + timedelta(hours=1)
    while end <= now:
        ends.append(end)
        end += timedelta(hours=1)
    return ends


@needs_faketime
@pytest.mark.parametrize("offset", ["+3h", "-3h"])
def test_a_scheduler_off_by_hours_creates_what_the_database_clock_says(
    offset, pg_env, dags_dir, tmp_path
):
    hourly_dag(dags_dir, hours_back=5)
    start = (datetime.now(UTC) - timedelta(hours=5)).replace(minute=0, second=0, microsecond=0)
    scheduler = skewed_scheduler(shifted(offset), 0, env=pg_env, log=tmp_path / "scheduler.log")
    try:
        wait_until(
            lambda: set(due_ends(pg_env, start)) <= set(interval_ends(pg_env)),
            timeout=30,
            what="every run due by the database's clock",
        )
        ends = interval_ends(pg_env)
        assert max(ends) <= db_now(pg_env), "a run whose interval has not ended was created"
        assert ends == due_ends(pg_env, start)
        wait_until(
            lambda: (
                "the database's decides what is due" in (tmp_path / "scheduler.log").read_text()
            ),
            timeout=30,
            what="the scheduler's warning about its clock",
        )
    finally:
        stop_process(scheduler)


ONE_TASK = """
    from dagrun import DAG, BashTask

    with DAG("later", schedule=None):
        BashTask("t", command="echo")
"""


@needs_faketime
def test_trigger_at_counts_from_the_database_clock(pg_env, dags_dir, tmp_path):
    write_dag(dags_dir, "later.py", ONE_TASK)
    scheduler = skewed_scheduler(shifted("+0"), 1, env=pg_env, log=tmp_path / "scheduler.log")
    try:
        before = db_now(pg_env)
        trigger = subprocess.run(
            dagrun_cmd("trigger", "later", "--at", "+4s"),
            env={**os.environ, **pg_env, **FAKED, **shifted("+3h")},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert trigger.returncode == 0, trigger.stderr
        wait_until(
            lambda: db_rows(pg_env, "SELECT state FROM dag_run") == [("success",)],
            timeout=40,
            what="the delayed run to end",
        )
        (not_before,) = db_rows(pg_env, "SELECT not_before FROM dag_run")[0]
        (started,) = db_rows(pg_env, "SELECT started_at FROM task_attempt")[0]
        assert timedelta(seconds=3) <= not_before - before <= timedelta(seconds=30)
        assert started >= not_before
    finally:
        stop_process(scheduler)


RETRY_AND_SENSOR = """
    import os
    from dagrun import DAG, task

    with DAG("skewed", schedule=None):
        @task(retries=1, retry_delay=4, retry_exponential_backoff=False)
        def flaky():
            marker = {marker!r}
            if not os.path.exists(marker):
                open(marker, "w").close()
                raise RuntimeError("first try fails")

        @task.sensor(poke_interval=1, timeout=4, mode="reschedule")
        def never():
            return False

        flaky()
        never()
"""


@needs_faketime
def test_a_worker_an_hour_ahead_keeps_retry_and_sensor_times_and_leases(pg_env, dags_dir, tmp_path):
    write_dag(dags_dir, "skewed.py", RETRY_AND_SENSOR.format(marker=str(tmp_path / "tried")))
    assert run_cli("trigger", "skewed", env=pg_env).returncode == 0
    ahead = skewed_scheduler(shifted("+1h"), 1, env=pg_env, log=tmp_path / "ahead.log")
    right_log = tmp_path / "right.log"
    right = started(
        lambda: start_skewed(shifted("+0"), "worker", "-c", "1", env=pg_env, log=right_log),
        right_log,
        "started with",
    )
    try:
        wait_until(
            lambda: db_rows(pg_env, "SELECT state FROM dag_run") in ([("failed",)], [("success",)]),
            timeout=60,
            what="the run to end",
        )
        tries = db_rows(
            pg_env,
            "SELECT task_id, started_at, ended_at, outcome FROM task_attempt ORDER BY id",
        )
        flaky = [t for t in tries if t[0] == "flaky"]
        assert [t[3] for t in flaky] == ["failed", "success"]
        assert flaky[1][1] - flaky[0][2] >= timedelta(seconds=4), "retried before its delay"
        pokes = [t for t in tries if t[0] == "never"]
        assert pokes[-1][3] == "timed_out"
        waited = pokes[-1][2] - pokes[0][1]  # the first poke's start to the last's end
        assert timedelta(seconds=4) <= waited <= timedelta(seconds=15)
        assert not [t for t in tries if t[3] == "lease_lost"]
    finally:
        stop_process(ahead)
        stop_process(right)


STEADY = """
    from dagrun import DAG, BashTask

    with DAG("steady", schedule="@hourly", start_date="{start}", catchup=True,
             max_active_runs=1):
        BashTask("a", command="sleep 0.3") >> BashTask("b", command="sleep 0.3")
"""


@needs_faketime
def test_a_sqlite_scheduler_stepped_back_an_hour_repeats_nothing(cli_env, dags_dir, tmp_path):
    start = (datetime.now(UTC) - timedelta(hours=6)).replace(minute=0, second=0, microsecond=0)
    write_dag(dags_dir, "steady.py", STEADY.format(start=start.strftime("%Y-%m-%dT%H:%M:%S+00:00")))
    spec = tmp_path / "faketime"
    spec.write_text("+0\n")
    clock = {"FAKETIME_TIMESTAMP_FILE": str(spec), "FAKETIME_NO_CACHE": "1"}
    assert run_cli("db", "init", env=cli_env).returncode == 0
    log = tmp_path / "scheduler.log"
    scheduler = skewed_scheduler(clock, 1, env=cli_env, log=log)
    try:
        wait_until(
            lambda: (
                db_rows(cli_env, "SELECT count(*) FROM dag_run WHERE state = 'success'")[0][0] >= 2
            ),
            timeout=60,
            what="two runs to end",
        )
        spec.write_text("-1h\n")
        wait_until(
            lambda: (
                db_rows(cli_env, "SELECT count(*) FROM dag_run WHERE state = 'success'")[0][0] >= 6
            ),
            timeout=90,
            what="every due run to end",
        )
        wait_until(
            lambda: "clock jumped back" in log.read_text(), timeout=30, what="the jump logged"
        )
    finally:
        stop_process(scheduler)
    dates = db_rows(cli_env, "SELECT logical_date FROM dag_run")
    assert len(dates) == len(set(dates)) >= 6
    tries = db_rows(cli_env, "SELECT ti_id, count(*) FROM task_attempt GROUP BY ti_id")
    assert {n for _, n in tries} == {1}

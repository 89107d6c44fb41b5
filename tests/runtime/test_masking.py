"""Secrets masking: the masker itself, how a process learns its secrets (one query every
few seconds, never one per attempt), and in-process attempts and callbacks whose output,
BashTask commands and errors hold a password: their logs and errors hold ``***``."""

from __future__ import annotations

import io
import os
import signal
from datetime import UTC, datetime
from pathlib import Path

import pytest

from dagrun.errors import StoreError
from dagrun.runtime import masking
from dagrun.runtime.callback_runner import execute_callback
from dagrun.runtime.masking import Masker, MaskingWriter, SecretCache
from dagrun.runtime.requests import AttemptResult, CallbackRequest
from dagrun.runtime.runner import DagCache, execute
from dagrun.states import AttemptOutcome, CallbackEvent
from dagrun.store import logfiles, sql
from dagrun.store import variables as var_store
from tests.helpers import attempt_request, write_dag

NOW = datetime(2026, 1, 5, tzinfo=UTC)
PASSWORD = "s3cr3t/pass"
URI = "postgresql://etl:s3cr3t%2Fpass@db.example.com:5432/sales"


def test_every_secret_is_masked_the_longest_first_and_short_ones_never():
    masker = Masker(["hunter2", "hunter2-and-more", "abc", ""])
    assert masker.secrets == {"hunter2", "hunter2-and-more"}
    assert masker.mask("a hunter2-and-more b hunter2 c abc") == "a *** b *** c abc"
    assert masker.mask_bytes(b"x hunter2\xff y") == b"x ***\xff y"
    nothing = Masker()
    text = "hunter2"
    assert not nothing and nothing.mask(text) is text


def test_the_writer_masks_a_secret_written_in_pieces_and_holds_nothing_back():
    out = io.StringIO()
    writer = MaskingWriter(out, Masker(["hunter2"]))
    writer.write("login hun")
    writer.write("ter2 ok\nthen hunt")
    assert out.getvalue() == "login *** ok\n"
    writer.write("er2")
    writer.flush()
    assert out.getvalue() == "login *** ok\nthen ***"
    with pytest.raises(TypeError):
        writer.write(b"bytes")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_process_reads_the_stored_secrets_once_per_interval_not_per_attempt(
    sqlite_store, monkeypatch
):
    for name in [n for n in os.environ if n.startswith(("DAGRUN_VAR_", "DAGRUN_CONN_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("DAGRUN_VAR_GITHUB_TOKEN", "from-the-env")
    monkeypatch.setenv("DAGRUN_VAR_REGION", "not-a-secret")
    monkeypatch.setenv("DAGRUN_CONN_DB", URI)
    _store_variable(sqlite_store, "db_password", "first-secret")
    clock, statements = Clock(), []
    cache = SecretCache(refresh=5.0, clock=clock)

    def record(text: str, *_) -> None:
        if not text.startswith("BEGIN"):  # a transaction's start is no read
            statements.append(text)

    with sql.observed(record):
        for second in range(5):  # five seconds of attempts
            clock.now = float(second)
            masker = cache.for_attempt(sqlite_store.url)
        assert len(statements) == 1
        assert masker.secrets == {"from-the-env", PASSWORD, "s3cr3t%2Fpass", "first-secret"}
        _store_variable(sqlite_store, "db_password", "second-secret")
        clock.now = 5.0
        cache.for_attempt(sqlite_store.url)
        assert len(statements) == 3  # the write above, and one read
    assert "second-secret" in masker and "first-secret" not in masker


def test_a_store_that_cannot_be_read_keeps_what_was_read_before(sqlite_store, tmp_path):
    _store_variable(sqlite_store, "api_token", "kept-secret")
    clock = Clock()
    cache = SecretCache(refresh=5.0, clock=clock)
    cache.for_attempt(sqlite_store.url)
    with sqlite_store.write() as conn:
        conn.exec_driver_sql("DROP TABLE variable")
    clock.now = 10.0
    assert "kept-secret" in cache.for_attempt(sqlite_store.url)
    missing = f"sqlite:///{tmp_path / 'empty.db'}"  # no tables: never read
    with pytest.raises(StoreError):
        cache.for_attempt(missing)


# ---------------------------------------------------------------- attempts and callbacks

LEAKY = """
import logging, os, sys
from dagrun import DAG, BashTask, Connection, Variable, task

from dagrun.runtime import notify
def heard(context):
    password = Connection.get("db").password
    print(f"callback sees {password}")
    with open(os.environ["HEARD"], "w") as out:
        out.write(context["exception"])

with DAG("mk", schedule=None):
    @task(on_failure_callback=[heard, notify.command("echo uri is $DAGRUN_CONN_DB")])
    def leaky():
        password = Connection.get("db").password
        print(f"printed {password}")
        logging.getLogger("user").warning("logged %s", password)
        sys.stderr.write("split " + password[:4])
        sys.stderr.write(password[4:] + "\\n")
        raise RuntimeError(f"cannot log in with {password}")

    leaky()
    BashTask(
        "shell",
        command="echo env $PW; echo uri $DAGRUN_CONN_DB; echo 'rendered {{ conn.db.password }}'; "
        "readlink /proc/$$/fd/1",
        env={"PW": "{{ conn.db.password }}"},
    )

    BashTask("background", command="(sleep 60; echo late) & echo started")

    @task
    def late():
        Variable.set("late_token", "registered-mid-attempt")
        print("late:", Variable.get("late_token"), type(sys.stdout).__name__)

    late()

    @task
    def plain():
        print("plain:", type(sys.stdout).__name__)

    plain()

    BashTask("plain_shell", command="readlink /proc/$$/fd/1")
"""


@pytest.fixture
def leaky(dags_dir: Path) -> Path:
    return write_dag(dags_dir, "leaky.py", LEAKY)


@pytest.fixture
def fresh(monkeypatch) -> SecretCache:
    """This process learns its secrets afresh (the environment set by the test)."""
    for name in [n for n in os.environ if n.startswith(("DAGRUN_VAR_", "DAGRUN_CONN_"))]:
        monkeypatch.delenv(name)
    cache = SecretCache()
    monkeypatch.setattr(masking, "CACHE", cache)
    return cache


@pytest.fixture
def secret_db(monkeypatch, fresh) -> None:
    monkeypatch.setenv("DAGRUN_CONN_DB", URI)


def run(path: Path, task_id: str, logs: Path, **fields) -> tuple[AttemptResult, str]:
    result = execute(attempt_request(path, task_id, logs, "mk", **fields), DagCache())
    return result, logfiles.read(result.log.path, result.log.offset, result.log.length)[0]


def test_print_logging_stderr_and_the_error_of_an_attempt_are_masked(leaky, tmp_path, secret_db):
    result, log = run(leaky, "leaky", tmp_path / "logs")
    assert result.outcome == AttemptOutcome.FAILED
    assert result.error == "RuntimeError: cannot log in with ***"
    assert "printed ***\n" in log and "WARNING user: logged ***\n" in log
    assert "split ***\n" in log, "a secret written in two pieces"
    assert "RuntimeError: cannot log in with ***" in log, "the traceback"
    assert PASSWORD not in log


def test_a_bash_task_knowing_secrets_is_piped_through_the_masker(leaky, tmp_path, secret_db):
    result, log = run(leaky, "shell", tmp_path / "logs")
    assert result.outcome == AttemptOutcome.SUCCESS, result.error
    assert "running: echo env $PW; echo uri $DAGRUN_CONN_DB; echo 'rendered ***'" in log
    assert "\nenv ***\n" in log and "\nrendered ***\n" in log
    assert "\nuri postgresql://etl:***@db.example.com:5432/sales\n" in log, "as written"
    assert "\npipe:[" in log
    assert PASSWORD not in log and "s3cr3t%2Fpass" not in log


@pytest.mark.timeout(30)  # waiting for the pipe would take the background sleep's 60 s
def test_a_piped_command_ends_when_its_shell_does_not_when_its_pipe_does(
    leaky, tmp_path, secret_db
):
    groups: list[int] = []
    request = attempt_request(leaky, "background", tmp_path / "logs", "mk")
    result = execute(request, DagCache(), groups.append)
    try:
        assert result.outcome == AttemptOutcome.SUCCESS, result.error
        os.killpg(groups[0], 0)  # its background process still runs, holding the pipe
    finally:
        os.killpg(groups[0], signal.SIGKILL)


def test_an_attempt_without_secrets_keeps_the_plain_stream_and_the_log_fd(leaky, tmp_path, fresh):
    _, log = run(leaky, "plain", tmp_path / "logs")
    assert "plain: TextIOWrapper\n" in log
    result, log = run(leaky, "plain_shell", tmp_path / "logs")
    assert f"\n{result.log.path}\n" in log, "the command writes to its log itself"


def test_a_secret_fetched_mid_attempt_is_masked_from_then_on(leaky, tmp_path, fresh, sqlite_store):
    result, log = run(leaky, "late", tmp_path / "logs", db_url=sqlite_store.url)
    assert result.outcome == AttemptOutcome.SUCCESS, result.error
    assert "late: *** MaskingWriter\n" in log
    assert "registered-mid-attempt" not in log


def test_short_secrets_are_not_masked(leaky, tmp_path, fresh, monkeypatch):
    monkeypatch.setenv("DAGRUN_CONN_DB", "postgresql://etl:abc@db/sales")
    result, log = run(leaky, "leaky", tmp_path / "logs")
    assert result.error == "RuntimeError: cannot log in with abc"
    assert "printed abc\n" in log


def test_a_callback_hears_and_logs_the_error_masked(leaky, tmp_path, secret_db, monkeypatch):
    monkeypatch.setenv("HEARD", str(tmp_path / "heard"))
    request = CallbackRequest(
        id=1,
        event=CallbackEvent.TASK_FAILURE,
        dag_id="mk",
        task_id="leaky",
        fileloc=str(leaky),
        timezone="UTC",
        run_id="r",
        logical_date=NOW,
        data_interval_start=NOW,
        data_interval_end=NOW,
        try_number=1,
        error=f"RuntimeError: cannot log in with {PASSWORD}",
        log_dir=str(tmp_path / "logs"),
    )
    result = execute_callback(request, DagCache())
    assert result.outcome == AttemptOutcome.SUCCESS, result.error
    log = logfiles.read(result.log.path, result.log.offset, result.log.length)[0]
    assert (tmp_path / "heard").read_text() == "RuntimeError: cannot log in with ***"
    assert "callback sees ***\n" in log
    assert "\nuri is postgresql://etl:***@db.example.com:5432/sales\n" in log
    assert PASSWORD not in log and "s3cr3t%2Fpass" not in log


def _store_variable(store, key: str, value: str) -> None:
    with store.write() as conn:
        var_store.set_variable(conn, key, value, None, NOW)

"""Airflow's ``email``, ``email_on_failure`` and ``email_on_retry`` (DESIGN 7.1): mail to a real
SMTP server on loopback when one is configured where the file is parsed and run, a warning
of the file when none is."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dagrun.airflow.mail import NO_SERVER
from dagrun.parsing import loader
from tests.helpers import run_once, write_dag
from tests.mailserver import Mailbox, mail_server

#: ``flaky`` mails only its failure (email_on_retry off in default_args), ``noisy`` its
#: retry and its failure, ``quiet`` nothing (both flags off), ``fine`` succeeds.
ALERTING = """
from datetime import timedelta

import pendulum
from airflow import DAG
from airflow.operators.bash import BashOperator
from airflow.operators.python import PythonOperator


def boom():
    raise ValueError("bad row 7")


with DAG(
    "alerting",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    default_args={
        "email": "ops@example.com; data@example.com",
        "email_on_retry": False,
        "retries": 1,
        "retry_delay": timedelta(0),
    },
):
    BashOperator(task_id="flaky", bash_command="exit 3")
    PythonOperator(task_id="noisy", python_callable=boom, email_on_retry=True)
    BashOperator(task_id="quiet", bash_command="exit 3", email_on_failure=False, retries=0)
    BashOperator(task_id="fine", bash_command="echo fine")
"""


@pytest.fixture
def mailbox(monkeypatch: pytest.MonkeyPatch) -> Iterator[Mailbox]:
    """A loopback SMTP server, named by the environment the parse and worker children
    inherit."""
    with mail_server() as box:
        for name, value in box.env().items():
            monkeypatch.setenv(name, value)
        yield box


@pytest.mark.slow
def test_a_failing_task_mails_its_addresses(store, dags_dir: Path, mailbox: Mailbox) -> None:
    write_dag(dags_dir, "alerting.py", ALERTING)

    run, tasks = run_once(store, dags_dir, "alerting")

    states = {t: (r.state, r.try_number) for t, r in tasks.items()}
    assert states == {
        "flaky": ("failed", 2),
        "noisy": ("failed", 2),
        "quiet": ("failed", 1),
        "fine": ("success", 1),
    }
    subjects = sorted(m.message["Subject"] for m in mailbox.received)
    day = run.logical_date.strftime("%Y-%m-%d")
    assert subjects == [
        f"[dagrun] alerting.flaky failed on {day} (try 2)",
        f"[dagrun] alerting.noisy failed on {day} (try 2)",
        f"[dagrun] alerting.noisy up_for_retry on {day} (try 1)",
    ]
    for mail in mailbox.received:
        assert mail.recipients == ["ops@example.com", "data@example.com"]
        assert mail.message["To"] == "ops@example.com, data@example.com"
    [noisy] = [m for m in mailbox.received if "noisy failed" in m.message["Subject"]]
    assert "error: ValueError: bad row 7" in noisy.message.get_content()


def callbacks(path: Path) -> dict[str, tuple[str, ...]]:
    specs, error, _ = loader.load(str(path))
    assert error is None, error
    return {t.task_id: t.callbacks for t in specs[0].tasks}


def test_with_a_server_the_flags_choose_the_callbacks(dags_dir: Path, mailbox: Mailbox) -> None:
    path = write_dag(dags_dir, "alerting.py", ALERTING)

    assert callbacks(path) == {
        "flaky": ("task_failure",),
        "noisy": ("task_retry", "task_failure"),
        "quiet": (),
        "fine": ("task_failure",),
    }
    assert loader.load(str(path)).warnings == []


def test_without_a_server_the_file_is_warned_once(
    dags_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DAGRUN_SMTP_HOST", raising=False)
    path = write_dag(dags_dir, "alerting.py", ALERTING)

    assert set(callbacks(path).values()) == {()}
    assert [message for _, message in loader.load(str(path)).warnings] == [NO_SERVER]
    assert NO_SERVER == "email: no mail is sent without an SMTP server (DAGRUN_SMTP_HOST)"


def test_a_bad_address_or_setting_is_an_import_error(
    dags_dir: Path, mailbox: Mailbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_dag(dags_dir, "alerting.py", ALERTING.replace("data@example.com", "data"))
    assert "email: email to: 'data' is not an email address" in str(loader.load(str(path)).error)

    monkeypatch.setenv("DAGRUN_SMTP_PORT", "smtp")
    path = write_dag(dags_dir, "alerting.py", ALERTING)
    assert "env DAGRUN_SMTP_PORT: smtp.port: must be a whole number" in str(
        loader.load(str(path)).error
    )

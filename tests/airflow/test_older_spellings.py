"""What Airflow files written for older and newer lines still say runs unchanged: Airflow
2.0's module names, is_venv_installed, the branch-in-another-Python operators, the
deferrable sensors' old names, xcom_pull with no key, an XComArg in an f-string,
ti.dag_run, task.params, templates_exts, EmailOperator."""

from __future__ import annotations

import json

from tests.helpers import run_once, write_dag
from tests.mailserver import mail_server

OLDER = """
import pendulum
from airflow import DAG
from airflow.operators.bash_operator import BashOperator
from airflow.operators.dummy_operator import DummyOperator
from airflow.operators.python import is_venv_installed
from airflow.operators.python_operator import BranchPythonVirtualenvOperator, PythonOperator
from airflow.sensors.time_delta import TimeDeltaSensorAsync
from airflow.decorators import task

assert is_venv_installed()


def push(ti):
    ti.xcom_push(key="value from pusher", value=[1, 2])


def pull(ti, dag_run, params, task):
    return [
        ti.xcom_pull(key=None, task_ids="push"),
        ti.dag_run.run_id == dag_run.run_id,
        params["region"],
        task.params["region"],
    ]


def choose():
    return "chosen"


with DAG("older", start_date=pendulum.datetime(2026, 1, 1), schedule=None,
         params={"region": "eu"}):
    start = DummyOperator(task_id="start")
    pushed = PythonOperator(task_id="push", python_callable=push)
    pulled = PythonOperator(task_id="pull", python_callable=pull)
    waited = TimeDeltaSensorAsync(task_id="waited", delta=pendulum.duration(seconds=0),
                                  poke_interval=0.1)
    branch = BranchPythonVirtualenvOperator(task_id="branch", python_callable=choose)
    chosen, other = DummyOperator(task_id="chosen"), DummyOperator(task_id="other")

    @task(templates_dict={"query": "query.sql"}, templates_exts=[".sql"])
    def templated(templates_dict=None):
        return templates_dict["query"]

    @task
    def word():
        return "hello"

    said_word = word()
    said = BashOperator(task_id="said", bash_command=f"echo {said_word} $((1 + 1))")
    said_word >> said  # an f-string keeps the value, not the dependency (as in Airflow)
    start >> pushed >> pulled >> waited >> branch >> [chosen, other]
    start >> templated()
"""


def test_older_and_newer_spellings_run_with_airflows_meaning(store, dags_dir):
    write_dag(dags_dir, "older.py", OLDER)
    (dags_dir / "query.sql").write_text("SELECT * FROM sales WHERE ds = '{{ ds }}'\n")
    run, tasks = run_once(store, dags_dir, "older")
    states = {t: r.state for t, r in tasks.items()}
    assert run.state == "success", {t: r.last_error for t, r in tasks.items() if r.last_error}
    assert (states["waited"], states["chosen"], states["other"]) == (
        "success",
        "success",
        "skipped",
    )
    with store.read() as conn:
        rows = dict(conn.exec_driver_sql("SELECT task_id, return_value FROM task_instance").all())
    values = {k: json.loads(v) for k, v in rows.items() if v is not None}
    assert values["pull"] == [[1, 2], True, "eu", "eu"]
    assert values["said"] == "hello 2", "an XComArg in an f-string is its value at run time"
    assert values["templated"].startswith("SELECT * FROM sales WHERE ds = '")


EMAIL = """
from airflow import DAG
from airflow.operators.email import EmailOperator

with DAG("mailer", schedule=None):
    EmailOperator(
        task_id="tell",
        to="ops@example.com; data@example.com",
        subject="Loaded {{ ds }}",
        html_content="<p>{{ params.rows }} rows</p>",
        params={"rows": 12},
    )
"""


def test_the_email_operator_sends_its_rendered_mail(store, dags_dir, monkeypatch):
    write_dag(dags_dir, "mailer.py", EMAIL)
    with mail_server() as box:
        for name, value in box.env().items():
            monkeypatch.setenv(name, value)
        run, tasks = run_once(store, dags_dir, "mailer")
        assert run.state == "success", tasks["tell"].last_error
        (mail,) = box.received
    assert sorted(mail.recipients) == ["data@example.com", "ops@example.com"]
    assert mail.message["Subject"].startswith("Loaded ")
    assert "<p>12 rows</p>" in mail.message.get_body().get_content()

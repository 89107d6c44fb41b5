"""Airflow's functions in another Python run unchanged: PythonVirtualenvOperator and
@task.virtualenv (an environment made once for the requirements, the system's packages seen
by default as in Airflow), ExternalPythonOperator and @task.external_python."""

from __future__ import annotations

import json
import sys

from tests.helpers import run_once, write_dag

ELSEWHERE = """
import sys
from airflow import DAG
from airflow.decorators import task
from airflow.operators.python import ExternalPythonOperator, PythonVirtualenvOperator

PYTHON = {python!r}


def where(greeting, ds=None):
    import sys

    return [greeting, ds is not None, sys.prefix != sys.base_prefix]


with DAG("elsewhere", schedule=None, default_args={{"retries": 0}}):
    in_venv = PythonVirtualenvOperator(
        task_id="in_venv", python_callable=where, op_args=["{{{{ dag.dag_id }}}}"]
    )
    external = ExternalPythonOperator(
        task_id="external", python=PYTHON, python_callable=where, op_kwargs={{"greeting": "x"}}
    )

    @task.virtualenv(requirements=[])
    def flow(value):
        import json

        return json.dumps(value)

    @task.external_python(python=PYTHON)
    def also(value):
        return value * 2

    flow(in_venv.output) >> also(21)
"""


def test_functions_in_other_pythons_run_with_airflows_meaning(
    store, dags_dir, tmp_path, monkeypatch
):
    monkeypatch.setenv("DAGRUN_HOME", str(tmp_path / "home"))
    write_dag(dags_dir, "elsewhere.py", ELSEWHERE.format(python=sys.executable))
    run, tasks = run_once(store, dags_dir, "elsewhere")
    assert run.state == "success", {t: r.last_error for t, r in tasks.items()}
    with store.read() as conn:
        rows = dict(conn.exec_driver_sql("SELECT task_id, return_value FROM task_instance").all())
    got = {task_id: json.loads(value) for task_id, value in rows.items()}
    assert got["in_venv"] == ["elsewhere", True, True], "op_args rendered, in a venv"
    assert got["external"] == ["x", True, sys.prefix != sys.base_prefix]
    assert got["flow"] == json.dumps(["elsewhere", True, True])
    assert got["also"] == 42

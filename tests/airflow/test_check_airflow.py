"""``dagrun dags check-airflow`` (DESIGN 7.1): Airflow-style DAG files read without running
them; what it calls unsupported is what fails the file's import, what it calls ok loads."""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import pytest

from dagrun.airflow import checks
from dagrun.airflow.checks import Finding, check_source
from dagrun.parsing import loader
from tests.helpers import run_cli, write_dag

IGNORED = checks.IGNORED
NOT_PROVIDED = checks.NOT_PROVIDED

#: Airflow 2.x's paths and 3.x's, classic operators and TaskFlow: everything dagrun runs.
SUPPORTED = """
    from datetime import datetime, timedelta

    import pendulum
    from airflow import DAG
    from airflow.decorators import dag, task, task_group
    from airflow.models.baseoperator import chain
    from airflow.operators.bash import BashOperator
    from airflow.operators.empty import EmptyOperator
    from airflow.operators.python import PythonOperator, PythonVirtualenvOperator
    from airflow.utils.trigger_rule import TriggerRule
    from airflow.utils.task_group import TaskGroup
    import airflow.utils.edgemodifier as edges

    default_args = {"owner": "data", "retries": 2, "retry_delay": timedelta(minutes=5)}


    def pull(**context):
        return context["ds"]


    with DAG(
        dag_id="supported",
        schedule="0 3 * * *",
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        default_args=default_args,
        tags=["team"],
    ) as supported:
        start = EmptyOperator(task_id="start")
        pulled = PythonOperator(task_id="pull", python_callable=pull, op_kwargs={"a": 1})
        with TaskGroup("steps", tooltip="the steps") as steps:
            BashOperator.partial(task_id="step", retries=1).expand(bash_command=["echo 1"])
        isolated = PythonVirtualenvOperator(
            task_id="isolated", python_callable=pull, requirements=[], system_site_packages=False
        )

        @task(retries=1, multiple_outputs=False)
        def transform(value):
            return value.upper()

        @task.bash(cwd="/tmp")
        def shout(value):
            return f"echo {value}"

        end = EmptyOperator(task_id="end", trigger_rule=TriggerRule.ALL_DONE)
        chain(start, pulled, steps, isolated, end)
        pulled >> edges.Label("upper") >> shout(transform(pulled.output)) >> end


    @dag(schedule=None, start_date=datetime(2026, 1, 1), catchup=False)
    def decorated():
        @task_group(group_id="inner")
        def inner():
            EmptyOperator(task_id="x")

        inner()


    decorated()
"""


def found(source: str, **options: bool) -> checks.FileReport:
    return check_source(textwrap.dedent(source), "dag.py", **options)


def unsupported(source: str) -> list[tuple[str, int]]:
    return [(f.name, f.line) for f in found(source).unsupported]


def test_a_file_dagrun_runs_unchanged_is_ok_with_its_warnings() -> None:
    report = found(SUPPORTED)

    assert report.ok and report.unsupported == []
    assert report.warnings == [Finding("default_args['owner']", 15, IGNORED)]
    assert report.to_json() == {
        "file": "dag.py",
        "ok": True,
        "unsupported": [],
        "warnings": [{"name": "default_args['owner']", "line": 15, "reason": IGNORED}],
    }


def test_imports_of_modules_and_names_dagrun_does_not_provide() -> None:
    assert unsupported(
        """
        import airflow
        import airflow.operators.bash
        import airflow.contrib.hooks.ssh_hook
        import airflow.kubernetes as k8s
        from airflow import models
        from airflow.sdk import DAG, task
        from airflow.providers.standard.operators.bash import BashOperator as Bash
        from airflow.providers.amazon.aws.hooks.s3 import S3Hook
        from airflow.operators.python import PythonOperator, Undefined
        from airflow.providers.docker.operators.docker import *
        from airflow.operators.bash import *
        from . import helpers
        import os.path
        print(airflow.__version__, models.Variable, models.Nope, airflow.operators.bash.Nope)
        """
    ) == [
        ("airflow.contrib.hooks.ssh_hook", 4),
        ("airflow.kubernetes", 5),
        ("airflow.providers.amazon.aws.hooks.s3.S3Hook", 9),
        ("airflow.operators.python.Undefined", 10),
        ("airflow.providers.docker.operators.docker.*", 11),
        ("airflow.models.Nope", 15),
        ("airflow.operators.bash.Nope", 15),
    ]


def test_arguments_that_would_be_refused_and_those_ignored() -> None:
    report = found(
        """
        from airflow import DAG
        from airflow.decorators import task
        from airflow.models import Variable
        from airflow.operators.bash import BashOperator

        with DAG("d", schedule=None, owner_links={"a": "b"}, fail_stop=False, colour="red"):
            BashOperator(task_id="a", bash_command="echo", queue="q", pool_slots=None, shade=1)
            BashOperator.partial(task_id="m", sla=3).expand(bash_command=["a"], nope=[1])
            Variable.get("key", default_var=1, bogus=2)

            @task(retries=1, weight_rule="absolute", flavour="y")
            def t():
                return 1

            @task.docker(image="x")
            def d():
                pass
        """
    )

    assert [(f.name, f.line, f.reason) for f in report.unsupported] == [
        ("DAG(colour=...)", 7, "not an argument of DAG"),
        ("BashOperator(shade=...)", 8, "not an argument of BashOperator"),
        ("BashOperator(nope=...)", 9, "not an argument of BashOperator"),
        ("Variable.get(bogus=...)", 10, "not an argument of Variable.get"),
        ("task(flavour=...)", 12, "not an argument of task"),
        ("task.docker", 16, NOT_PROVIDED),
    ]
    assert [(f.name, f.line) for f in report.warnings] == [
        ("DAG(owner_links=...)", 7),  # fail_stop=False is not warned: a parse ignores it too
        ("BashOperator(queue=...)", 8),
        ("BashOperator(sla=...)", 9),
        ("task(weight_rule=...)", 12),
    ]


@pytest.mark.parametrize(
    ("schedule", "name"),
    [
        ('schedule="@continuous"', "DAG(schedule='@continuous')"),
        ('schedule_interval=" @continuous"', "DAG(schedule_interval=' @continuous')"),
        ("schedule=relativedelta(months=1)", "DAG(schedule=relativedelta(...))"),
        (
            "timetable=dateutil.relativedelta.relativedelta(days=2)",
            "DAG(timetable=relativedelta(...))",
        ),
    ],
)
def test_schedules_dagrun_does_not_have(schedule: str, name: str) -> None:
    report = found(
        f"""
        import dateutil.relativedelta
        from dateutil.relativedelta import relativedelta
        from airflow.models.dag import DAG

        DAG("d", {schedule})
        """
    )

    [finding] = report.unsupported
    assert finding.name.startswith(name) and finding.line == 6


def test_default_args_warn_their_ignored_keys_once() -> None:
    report = found(
        """
        from airflow import DAG
        from airflow.operators.empty import EmptyOperator

        shared = {
            "owner": "data",
            "queue": None,
            "weight_rule": "absolute",
            "anything": 1,
        }
        with DAG("one", default_args=shared):
            EmptyOperator(task_id="a", default_args={"run_as_user": "etl"})
        with DAG("two", default_args=shared):
            EmptyOperator(task_id="a")
        """
    )

    assert report.ok
    assert [(f.name, f.line) for f in report.warnings] == [
        ("default_args['owner']", 6),
        ("default_args['weight_rule']", 8),
        ("default_args['run_as_user']", 12),
    ]


EMAIL = """
    from airflow import DAG
    from airflow.operators.empty import EmptyOperator

    with DAG("d", default_args={"email": ["ops@example.com"], "email_on_retry": False}):
        EmptyOperator(task_id="a", email="data@example.com")
        EmptyOperator(
            task_id="b", email="x@example.com", email_on_failure=False, email_on_retry=False
        )
"""


def test_an_email_without_an_smtp_server_is_a_warning() -> None:
    no_server = [(f.name, f.line, f.reason) for f in found(EMAIL).warnings]
    reason = "no mail is sent without an SMTP server (DAGRUN_SMTP_HOST)"
    assert no_server == [
        ("default_args['email']", 5, reason),
        ("EmptyOperator(email=...)", 6, reason),
    ]
    assert found(EMAIL, mail_server=True).warnings == []


def test_a_name_the_file_gives_another_value_is_left_alone() -> None:
    assert (
        found(
            """
        from airflow.decorators import task
        from airflow.operators.bash import BashOperator


        def on_failure(context):
            task = context["task"]
            print(task.not_an_airflow_attribute)


        def make(BashOperator):
            return BashOperator(anything=1)
        """
        ).unsupported
        == []
    )


def test_an_import_of_airflow_beside_another_module_still_binds() -> None:
    assert unsupported("import json, airflow.operators.empty\nairflow.operators.empty.Nope\n") == [
        ("airflow.operators.empty.Nope", 2)
    ]


def test_a_syntax_error_and_a_file_without_airflow() -> None:
    broken = found("from airflow import DAG\nDAG('d'\n")
    assert not broken.ok and broken.unsupported[0].name == "syntax error"
    assert found("import os\nprint(os.getcwd())\n").to_json()["ok"] is True


# ---------------------------------------------------------------- agreement with a parse

LOADS_OR_NOT = {
    "supported": (SUPPORTED, True),
    "not_served": ("from airflow.providers.amazon.aws.hooks.s3 import S3Hook\n", False),
    "refused_dag": ('from airflow import DAG\nDAG("d", schedule=None, colour=1)\n', False),
    "refused_task": (
        """
        from airflow import DAG
        from airflow.operators.bash import BashOperator

        with DAG("d", schedule=None):
            BashOperator(task_id="a", bash_command="echo", shade=1)
        """,
        False,
    ),
    "continuous": ('from airflow import DAG\nDAG("d", schedule="@continuous")\n', False),
    "variant": (
        """
        from airflow import DAG
        from airflow.decorators import task

        with DAG("d", schedule=None):
            @task.docker(image="x")
            def d():
                pass
        """,
        False,
    ),
}


@pytest.mark.parametrize("name", sorted(LOADS_OR_NOT))
def test_ok_means_the_file_loads(name: str, dags_dir: Path) -> None:
    source, expected = LOADS_OR_NOT[name]
    path = write_dag(dags_dir, f"{name}.py", source)

    report = check_source(path.read_bytes(), str(path))
    _, error, _ = loader.load(str(path))

    assert report.ok is expected
    assert (error is None) is expected, error


def test_a_hundred_files_are_read_well_under_a_second(tmp_path: Path) -> None:
    check_source(textwrap.dedent(SUPPORTED))  # what it imports once, not per file
    sources = [textwrap.dedent(SUPPORTED).replace("supported", f"dag_{n}") for n in range(100)]

    started = time.perf_counter()
    reports = [check_source(source, f"dag_{n}.py") for n, source in enumerate(sources)]
    elapsed = time.perf_counter() - started

    assert all(r.ok for r in reports)
    assert elapsed < 0.5, f"{elapsed:.2f} s for 100 files"


# ---------------------------------------------------------------- the command


def test_the_command_reports_each_file_and_exits_1_when_one_is_not_ok(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    folder = tmp_path / "airflow_dags"
    good = write_dag(folder, "good.py", SUPPORTED)
    bad = write_dag(folder / "team", "bad.py", LOADS_OR_NOT["refused_task"][0])
    write_dag(folder / "__pycache__", "skipped.py", "import airflow.nope\n")

    result = run_cli("dags", "check-airflow", str(folder), env=cli_env)

    assert result.returncode == 1, result.stderr
    assert result.stdout.splitlines() == [
        f"{good}: ok (1 warning)",
        f"{good}:14: warning: default_args['owner']: {IGNORED}",
        f"{bad}: not ok (1 unsupported)",
        f"{bad}:5: unsupported: BashOperator(shade=...): not an argument of BashOperator",
        "2 files: 1 ok, 1 not ok",
    ]
    document = json.loads(
        run_cli("dags", "check-airflow", str(good), str(bad), "--json", env=cli_env).stdout
    )
    assert document == [
        check_source(good.read_bytes(), str(good)).to_json(),
        {
            "file": str(bad),
            "ok": False,
            "unsupported": [
                {
                    "name": "BashOperator(shade=...)",
                    "line": 5,
                    "reason": "not an argument of BashOperator",
                }
            ],
            "warnings": [],
        },
    ]
    assert run_cli("dags", "check-airflow", str(good), env=cli_env).returncode == 0


def test_the_command_refuses_a_path_that_does_not_exist(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    result = run_cli("dags", "check-airflow", str(tmp_path / "missing.py"), env=cli_env)

    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip() == f"error: {tmp_path / 'missing.py'}: no such file or folder"

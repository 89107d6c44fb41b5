"""``import airflow...`` in a DAG file resolves to dagrun's compatibility package
(dagrun.parsing.airflow_alias): only where DAG files are imported, never over a real
Airflow, and a name dagrun does not provide fails that file alone, naming it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from dagrun.parsing import airflow_alias, airflow_names
from dagrun.parsing.loader import load_file
from dagrun.parsing.parser import discover, parse_files
from tests.helpers import write_dag

AIRFLOW_FILE = """
from airflow import DAG
from airflow.operators.bash import BashOperator
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import task

with DAG("served", schedule=None):
    BashOperator(task_id="shell", bash_command="echo hi")
    PythonOperator(task_id="call", python_callable=print)

    @task
    def flow():
        return 1

    flow()
"""


def test_a_file_importing_airflow_gets_dagruns_task_graph(dags_dir):
    path = write_dag(dags_dir, "served.py", AIRFLOW_FILE)
    specs, error = load_file(str(path))
    assert error is None
    (spec,) = specs
    assert [(t.task_id, t.kind) for t in spec.tasks] == [
        ("shell", "BashOperator"),
        ("call", "PythonOperator"),
        ("flow", "@task"),
    ]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "from airflow.providers.amazon.aws.hooks.s3 import S3Hook",
            "airflow.providers.amazon.aws.hooks.s3: S3Hook is not provided by dagrun",
        ),
        (
            "from airflow.operators.bash import BashSensorThatDoesNotExist",
            "airflow.operators.bash: BashSensorThatDoesNotExist is not provided by dagrun",
        ),
        (
            "import airflow.configuration as c; c.conf",
            "airflow.configuration: conf is not provided by dagrun",
        ),
    ],
)
def test_a_name_not_provided_fails_that_file_alone_naming_it(dags_dir, line, expected):
    bad = write_dag(dags_dir, "bad.py", f"{line}\n" + AIRFLOW_FILE.replace("served", "other"))
    good = write_dag(dags_dir, "good.py", AIRFLOW_FILE)
    results = parse_files(discover(dags_dir))
    error = results[str(bad)].error
    assert error is not None and error.line == 1
    assert expected in error.reason
    assert results[str(good)].error is None
    assert [d.dag_id for d in results[str(good)].dags] == ["served"]


def test_every_served_name_resolves_to_an_object_of_dagrun_airflow():
    missing = []
    for path, names in airflow_names.PATHS.items():
        for name in names:
            home = airflow_names.provided(path, name)
            assert home is not None
            module, attribute = home.split(":")
            try:
                __import__(module)
                getattr(sys.modules[module], attribute)
            except (ImportError, AttributeError) as exc:
                missing.append(f"{path}.{name}: {exc}")
    assert missing == []


def test_the_parsing_process_is_the_only_one_that_sees_airflow(dags_dir, tmp_path):
    """The CLI parses in children: its own process never imports an ``airflow`` module."""
    write_dag(dags_dir, "served.py", AIRFLOW_FILE)
    code = textwrap.dedent(
        f"""
        import sys
        from dagrun.parsing.parser import discover, parse_files
        results = parse_files(discover({str(dags_dir)!r}))
        assert [r.error for r in results.values()] == [None], results
        print(sorted(m for m in sys.modules if m == "airflow" or m.startswith("airflow.")))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_real_airflow_on_the_path_is_left_alone(dags_dir, tmp_path):
    real = tmp_path / "site" / "airflow"
    real.mkdir(parents=True)
    (real / "__init__.py").write_text("DAG = 'the real one'\n")
    path = write_dag(dags_dir, "real.py", "from airflow import DAG\nKIND = DAG\n")
    code = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(tmp_path / "site")!r})
        from dagrun.parsing import airflow_alias
        from dagrun.parsing.loader import import_file
        import_file({str(path)!r})
        module = [m for n, m in sys.modules.items() if n.startswith("dagrun_file_")][0]
        print(airflow_alias.install(), module.KIND)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False the real one"


def test_airflow_version_and_module_listing():
    assert airflow_alias.install()  # this process imports DAG files
    import airflow
    import airflow.operators.bash

    assert airflow.__version__ == airflow_names.VERSION
    assert "BashOperator" in dir(airflow.operators.bash)
    with pytest.raises(AttributeError):
        airflow._private_name  # noqa: B018 (the attribute access is the test)

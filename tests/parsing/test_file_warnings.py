"""A DAG file's warnings (what it asks for that dagrun accepts without acting on) from the
import to the parse child's answer: each once per file, at the first line that asked, in
line order; none for a file that fails, nor for a native file."""

from __future__ import annotations

from pathlib import Path

from dagrun.parsing import loader, parser
from dagrun.parsing.spec import FileWarning
from tests.helpers import write_dag

#: Two DAGs ignoring arguments: ``owner`` from default_args reaches every task (one warning),
#: ``sla`` and ``weight_rule`` come from tasks, ``owner_links`` from a DAG.
IGNORING = """
    from datetime import datetime, timedelta

    from airflow import DAG
    from airflow.decorators import task
    from airflow.operators.bash import BashOperator

    default_args = {"owner": "data", "retries": 1, "queue": None}

    with DAG("first", start_date=datetime(2026, 1, 1), default_args=default_args):
        first = BashOperator(task_id="a", bash_command="echo a")
        second = BashOperator(task_id="b", bash_command="echo b", sla=timedelta(hours=1))

        @task(weight_rule="absolute")
        def c():
            return 1

        first >> second >> c()

    with DAG("second", schedule=None, default_args=default_args, owner_links={"data": "x"}):
        BashOperator(task_id="a", bash_command="echo a", sla=timedelta(hours=2))
"""
EXPECTED = [
    FileWarning(10, "owner: accepted but not acted on by dagrun"),
    FileWarning(11, "sla: accepted but not acted on by dagrun"),
    FileWarning(17, "weight_rule: accepted but not acted on by dagrun"),
    FileWarning(19, "owner_links: accepted but not acted on by dagrun"),
]
NATIVE = """
    from dagrun import DAG, BashTask

    with DAG("native", schedule=None):
        BashTask("t", command="echo")
"""


def test_the_loader_gives_each_warning_once_in_line_order(dags_dir: Path) -> None:
    path = write_dag(dags_dir, "ignoring.py", IGNORING)

    specs, error, warnings = loader.load(str(path))

    assert error is None and [s.dag_id for s in specs] == ["first", "second"]
    assert warnings == EXPECTED


def test_a_file_that_fails_has_its_error_and_no_warnings(dags_dir: Path) -> None:
    path = write_dag(dags_dir, "ignoring.py", IGNORING + "    raise RuntimeError('late')\n")

    specs, error, warnings = loader.load(str(path))

    assert specs == [] and warnings == []
    assert error is not None and "RuntimeError: late" in error.reason


def test_a_native_file_has_no_warnings(dags_dir: Path) -> None:
    specs, error, warnings = loader.load(str(write_dag(dags_dir, "native.py", NATIVE)))

    assert error is None and len(specs) == 1 and warnings == []


def test_the_parse_child_sends_the_warnings(dags_dir: Path) -> None:
    write_dag(dags_dir, "ignoring.py", IGNORING)
    write_dag(dags_dir, "native.py", NATIVE)

    results = parser.parse_files(parser.discover(dags_dir), timeout=30)

    by_name = {Path(p).name: r for p, r in results.items()}
    assert by_name["ignoring.py"].warnings == tuple(EXPECTED)
    assert by_name["native.py"].warnings == ()

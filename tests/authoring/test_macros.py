"""Template names (ts, ts_nodash, macros) and the check of every template when the DAG file
is parsed: a name the context lacks, or a syntax error, is an import error of the file."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from dagrun import DAG, BashTask, task
from dagrun.authoring import macros
from dagrun.authoring.context_names import CONTEXT_NAMES
from dagrun.errors import DagDefinitionError
from dagrun.parsing import parser
from dagrun.runtime.context import make_context
from dagrun.runtime.rendering import render
from dagrun.runtime.runner import DagCache, execute
from dagrun.states import AttemptOutcome
from dagrun.store import logfiles
from tests.helpers import attempt_request, write_dag

# ---------------------------------------------------------------- macros


@pytest.mark.parametrize(
    ("ds", "days", "expected"),
    [
        ("2026-01-05", 3, "2026-01-08"),
        ("2026-01-05", -1, "2026-01-04"),
        ("2026-01-05", 0, "2026-01-05"),
        ("2026-01-31", 1, "2026-02-01"),
        ("2026-03-01", -1, "2026-02-28"),
        ("2024-03-01", -1, "2024-02-29"),
        ("2026-12-31", 1, "2027-01-01"),
    ],
)
def test_ds_add_moves_by_whole_days_across_month_and_year_ends(ds, days, expected):
    assert macros.ds_add(ds, days) == expected


def test_ds_format_reads_one_format_and_writes_another():
    assert macros.ds_format("2026-01-05", "%Y-%m-%d", "%d/%m/%y") == "05/01/26"
    assert macros.ds_format("20260105", "%Y%m%d", "%Y-%m-%d") == "2026-01-05"


def test_macros_carry_the_datetime_classes():
    assert macros.datetime is datetime
    assert macros.timedelta is timedelta


# ---------------------------------------------------------------- ts and ts_nodash


def dhaka_context(logical_date: datetime):
    return make_context(
        dag_id="d",
        task_id="t",
        run_id="r",
        timezone="Asia/Dhaka",
        logical_date=logical_date,
        data_interval_start=logical_date,
        data_interval_end=logical_date + timedelta(days=1),
    )


def test_ts_keeps_the_dags_offset_and_ts_nodash_drops_it():
    names = dhaka_context(datetime(2026, 1, 4, 18, 0, tzinfo=UTC)).names()
    assert names["ts"] == "2026-01-05T00:00:00+06:00"
    assert names["ts_nodash"] == "20260105T000000"
    assert names["ds"] == "2026-01-05"


@pytest.mark.parametrize("name", CONTEXT_NAMES)
def test_every_name_the_parse_accepts_renders_at_run_time(name):
    names = dhaka_context(datetime(2026, 1, 4, 18, 0, tzinfo=UTC)).names()
    assert render(f"{{{{ {name} is defined }}}}", names) == "True"


def test_a_bash_command_renders_ts_and_macros_in_the_dags_timezone(dags_dir, tmp_path):
    path = write_dag(
        dags_dir,
        "stamps.py",
        """
        from dagrun import DAG, BashTask

        with DAG("rt", schedule=None, timezone="Asia/Dhaka"):
            BashTask("echo", command="echo at {{ ts }} {{ ts_nodash }} {{ macros.ds_add(ds, -1) }}")
        """,
    )
    request = attempt_request(
        path, "echo", tmp_path, "rt", logical_date=datetime(2026, 1, 4, 18, 0, tzinfo=UTC)
    )
    result = execute(dataclasses.replace(request, timezone="Asia/Dhaka"), DagCache())
    assert result.outcome == AttemptOutcome.SUCCESS
    log = logfiles.read(result.log.path, result.log.offset, result.log.length)[0]
    assert "\nat 2026-01-05T00:00:00+06:00 20260105T000000 2026-01-04\n" in log


def test_a_task_callable_receives_ts_and_macros(dags_dir):
    path = write_dag(
        dags_dir,
        "wants.py",
        """
        from dagrun import DAG, task

        with DAG("rt", schedule=None):
            @task
            def wants(ts, ts_nodash, macros, ds):
                return [ts, ts_nodash, macros.ds_add(ds, 2)]

            wants()
        """,
    )
    result = execute(attempt_request(path, "wants", None, "rt"), DagCache())
    assert result.return_value == '["2026-01-05T00:00:00+00:00", "20260105T000000", "2026-01-07"]'


# ---------------------------------------------------------------- checked at parse time


def parse_one(dags_dir: Path, source: str) -> parser.FileResult:
    path = write_dag(dags_dir, "f.py", source)
    return parser.parse_files({str(path): parser.file_hash(str(path))}, timeout=10.0)[str(path)]


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ('BashTask("t", command="echo {{ tss }}")', ["'tss'", "not a context name", "ts_nodash"]),
        ('BashTask("t", command="echo {{ ds ")', ["command", "syntax error", "line 1"]),
        (
            'BashTask("t", command="run.sh", env={"OUT": "{{ dsx }}"})',
            ["env['OUT']", "'dsx'"],
        ),
        (
            'BashTask("t", command="run.sh", params={"days": ["{{ ds }}", "{{ yesterday }}"]})',
            ["params['days'][1]", "'yesterday'"],
        ),
    ],
)
def test_a_bad_template_makes_the_file_an_import_error_naming_task_and_name(dags_dir, line, words):
    result = parse_one(
        dags_dir,
        f"""
        from dagrun import DAG, BashTask

        with DAG("sales", schedule=None):
            BashTask("ok", command="echo {{{{ ds }}}}")
            {line}
        """,
    )
    assert result.dags == []
    assert result.error.reason.startswith("task 't' in DAG 'sales': template in ")
    assert "\n" not in result.error.reason
    assert result.error.line == 5
    for word in words:
        assert word in result.error.reason


def test_a_bad_template_in_a_python_tasks_params_is_an_error_too():
    with DAG("d"):

        @task(params={"day": "{{ dss }}"})
        def report(params):
            return params

        with pytest.raises(DagDefinitionError) as info:
            report()
    assert str(info.value).startswith("task 'report' in DAG 'd': template in params['day'] uses")
    assert "'dss'" in str(info.value)


def test_default_args_params_are_checked_for_every_task():
    with (
        DAG("d", default_args={"params": {"day": "{{ dss }}"}}),
        pytest.raises(DagDefinitionError, match=r"task 't' in DAG 'd'.*'dss'"),
    ):
        BashTask("t", command="echo")


@pytest.mark.parametrize(
    "template",
    [
        "{{ params.x }}",
        "{{ conf.get('a') }}",
        "{% for i in range(3) %}{{ i }}{% endfor %}",
        "{% set day = macros.ds_add(ds, 1) %}{{ day }}",
        "{{ macros.ds_format(ds, '%Y-%m-%d', '%d.%m.%Y') }} {{ ts_nodash }}",
        "{{ ctx.ds }} {{ idempotency_key }} {{ fence_token }} {{ ds | upper }}",
        "no template at all: {ds} { {ds} } %}",
    ],
)
def test_templates_using_only_context_names_are_accepted(template):
    with DAG("d") as dag:
        BashTask("t", command=f"echo {template}", env={"X": template}, params={"p": template})
    assert "t" in dag.tasks


def test_every_context_name_is_accepted_in_a_template():
    with DAG("d") as dag:
        BashTask("t", command=" ".join(f"{{{{ {name} }}}}" for name in CONTEXT_NAMES))
    assert "t" in dag.tasks


@pytest.mark.parametrize(("command", "imported"), [("echo plain", False), ("echo {{ ds }}", True)])
def test_jinja2_is_imported_only_for_a_file_with_templates(dags_dir, command, imported):
    path = write_dag(
        dags_dir,
        "f.py",
        f"""
        from dagrun import DAG, BashTask

        with DAG("d", schedule=None):
            BashTask("t", command="{command}")
        """,
    )
    code = (
        "import sys\nfrom dagrun.parsing import loader\n"
        f"assert loader.import_file({str(path)!r})\nprint('jinja2' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=os.environ
    )
    assert out.stdout.strip() == str(imported), out.stderr

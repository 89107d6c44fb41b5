"""Airflow's operators run unchanged (DESIGN 7.1): Bash, Python, Empty, a file's own
BaseOperator subclass with template fields and files, Airflow's exceptions, XComs, macros and
the context, with the task states and values Airflow gives, on SQLite and PostgreSQL."""

from __future__ import annotations

import json

from tests.helpers import run_once, write_dag

CLASSIC = """
from datetime import timedelta

import pendulum
from airflow import DAG
from airflow.exceptions import AirflowFailException, AirflowSkipException
from airflow.models import BaseOperator, Variable
from airflow.operators.bash import BashOperator
from airflow.operators.empty import EmptyOperator
from airflow.operators.python import PythonOperator, get_current_context
from airflow.utils.trigger_rule import TriggerRule


class CountRows(BaseOperator):
    template_fields = ("sql", "table")
    template_ext = (".sql",)
    ui_color = "#ededed"

    def __init__(self, *, sql, table, **kwargs):
        super().__init__(**kwargs)
        self.sql = sql
        self.table = table

    def execute(self, context):
        context["ti"].xcom_push(key="table", value=self.table)
        self.log.info("running %s", self.sql)
        return {"sql": self.sql.strip(), "owner": self.owner, "retries": self.retries}


def shout(word, times, templates_dict=None, **context):
    assert context["task"].task_id == "shout"
    same_run = context["dag_run"].run_id == context["run_id"]
    return f"{word * times} {templates_dict['when']} {same_run}"


def skip_me():
    raise AirflowSkipException("nothing new")


def fail_hard():
    raise AirflowFailException("bad input")


def from_context(value):
    context = get_current_context()
    return [value, context["ti"].task_id, Variable.get("missing", default_var="dflt")]


with DAG(
    dag_id="classic",
    schedule="@daily",
    start_date=pendulum.datetime(2026, 1, 1, tz="Asia/Dhaka"),
    default_args={"owner": "data", "retries": 2, "retry_delay": timedelta(seconds=1)},
    template_searchpath="sql",
    user_defined_macros={"project": "dw"},
    user_defined_filters={"shout": lambda text: text.upper()},
    catchup=False,
) as dag:
    start = EmptyOperator(task_id="start")
    last = BashOperator(
        task_id="last",
        bash_command="echo first; echo {{ ds }} {{ project | shout }} $AIRFLOW_CTX_DAG_ID",
    )
    bare = BashOperator(
        task_id="bare",
        bash_command="echo ${HOME:-unset} $MINE",
        env={"MINE": "{{ ds_nodash }}"},
    )
    skipped = BashOperator(task_id="skipped", bash_command="exit 99")
    script = BashOperator(task_id="script", bash_command="load.sh", env={"X": "1"}, append_env=True)
    counted = CountRows(task_id="counted", sql="count.sql", table="{{ params.table }}",
                        params={"table": "sales"})
    shouted = PythonOperator(
        task_id="shout",
        python_callable=shout,
        op_args=["ho"],
        op_kwargs={"times": 2},
        templates_dict={"when": "{{ ds }}"},
    )
    passed = PythonOperator(
        task_id="passed", python_callable=from_context, op_kwargs={"value": counted.output}
    )
    skip = PythonOperator(task_id="skip", python_callable=skip_me)
    fail = PythonOperator(task_id="fail", python_callable=fail_hard)
    after_fail = EmptyOperator(task_id="after_fail")
    after_fail.trigger_rule = TriggerRule.ALL_FAILED
    start >> [last, bare, skipped, script, counted, shouted]
    counted >> passed
    skip >> EmptyOperator(task_id="after_skip")
    fail >> after_fail
"""


def values(store) -> dict[str, object]:
    with store.read() as conn:
        rows = conn.exec_driver_sql(
            "SELECT task_id, return_value FROM task_instance WHERE return_value IS NOT NULL"
        ).all()
    return {task_id: json.loads(value) for task_id, value in rows}


def test_classic_operators_run_with_airflows_meaning(store, dags_dir):
    write_dag(dags_dir, "classic.py", CLASSIC)
    (dags_dir / "sql").mkdir()
    (dags_dir / "sql" / "count.sql").write_text("SELECT count(*) FROM {{ params.table }}\n")
    (dags_dir / "load.sh").write_text("echo loaded $X for {{ ds }}\n")
    run, tasks = run_once(store, dags_dir, "classic")
    states = {t: r.state for t, r in tasks.items()}
    assert states == {
        "start": "success",
        "last": "success",
        "bare": "success",
        "skipped": "skipped",
        "script": "success",
        "counted": "success",
        "shout": "success",
        "passed": "success",
        "skip": "skipped",
        "after_skip": "skipped",
        "fail": "failed",
        "after_fail": "success",
    }, {t: r.last_error for t, r in tasks.items()}
    assert tasks["fail"].try_number == 1, "AirflowFailException is not retried"
    assert run.state == "failed"
    ds = run.logical_date.astimezone(__import__("zoneinfo").ZoneInfo("Asia/Dhaka"))
    day = ds.strftime("%Y-%m-%d")
    got = values(store)
    assert got["last"] == f"{day} DW classic"
    assert got["bare"] == f"unset {ds:%Y%m%d}", "env replaces the environment"
    assert got["script"] == f"loaded 1 for {day}"
    assert got["counted"] == {"sql": "SELECT count(*) FROM sales", "owner": "data", "retries": 2}
    assert got["shout"] == f"hoho {day} True"
    assert got["passed"] == [got["counted"], "passed", "dflt"]
    with store.read() as conn:
        pushed = conn.exec_driver_sql("SELECT task_id, key, value FROM xcom").all()
    assert [tuple(r) for r in pushed] == [("counted", "table", '"sales"')]


TASKFLOW = """
import pendulum
from airflow.decorators import dag, task, task_group
from airflow.models.baseoperator import chain, cross_downstream
from airflow.operators.bash import BashOperator
from airflow.operators.empty import EmptyOperator
from airflow.operators.python import PythonOperator
from airflow.utils.edgemodifier import Label
from airflow.utils.task_group import TaskGroup


@task
def split(text) -> dict[str, int]:
    return {"words": len(text.split()), "chars": len(text)}


@task
def double(num):
    return num * 2


@task
def add(left, right):
    return left + right


@task
def total(values):
    return sum(values)


@task(multiple_outputs=True)
def pair():
    return {"a": 1, "b": 2}


@task_group
def scale(factor):
    return double.override(task_id="scaled")(factor)


def power(base, exp):
    return base ** exp


@dag(schedule=None, start_date=pendulum.datetime(2026, 1, 1), tags=["flow"])
def taskflow(greeting: str = "hello big world"):
    parts = split(greeting)
    chained = total(add.expand(left=double.expand(num=[1, 2, 3]), right=[10]))
    kwargs = add.expand_kwargs([{"left": 1, "right": 2}, {"left": 3, "right": 4}])
    first = double(parts["words"])
    again = double(parts["chars"])
    both = pair()
    summed = add(both["a"], both["b"])
    powers = PythonOperator.partial(task_id="powers", python_callable=power).expand(
        op_args=[[2, 3], [3, 2]]
    )
    echoes = BashOperator.partial(task_id="echoes").expand(
        bash_command=["echo one", "echo two"]
    )
    with TaskGroup("grouped", default_args={"retries": 4}, prefix_group_id=False) as grouped:
        inner = EmptyOperator(task_id="inner")
    pulled = BashOperator(
        task_id="pulled",
        bash_command="echo {{ ti.xcom_pull(task_ids='split')['words'] }} "
        "{{ ti.xcom_pull(task_ids='total') }}",
    )
    scaled = scale(5)
    scale(6)
    end = EmptyOperator(task_id="end")
    chain(parts, Label("checked"), pulled, [first, again], end)
    chained >> pulled
    cross_downstream([kwargs, summed], [powers, echoes])
    grouped >> end
    scaled >> end


taskflow()
"""


def test_taskflow_mapping_xcoms_groups_and_chains(store, dags_dir):
    write_dag(dags_dir, "taskflow.py", TASKFLOW)
    run, tasks = run_once(store, dags_dir, "taskflow")
    assert run.state == "success", {t: r.last_error for t, r in tasks.items() if r.last_error}
    got = values(store)
    assert got["split"] == {"words": 3, "chars": 15}
    assert got["total"] == 2 * (1 + 2 + 3) + 3 * 10
    assert got["double__1"] == 6 and got["double__2"] == 30, "repeated calls: name__1, name__2"
    assert got["add__2"] == 3, "a multiple_outputs task's keys passed as result['key']"
    assert got["pulled"] == "3 42"
    assert got["scale.scaled"] == 10 and got["scale__1.scaled"] == 12
    with store.read() as conn:
        rows = conn.exec_driver_sql(
            "SELECT task_id, map_index, return_value FROM task_instance "
            "WHERE task_id IN ('powers', 'echoes', 'add__1') ORDER BY task_id, map_index"
        ).all()
        pushed = dict(
            conn.exec_driver_sql("SELECT key, value FROM xcom WHERE task_id = 'pair'").all()
        )
    assert [tuple(r) for r in rows] == [
        ("add__1", 0, "3"),
        ("add__1", 1, "7"),
        ("echoes", 0, '"one"'),
        ("echoes", 1, '"two"'),
        ("powers", 0, "8"),
        ("powers", 1, "9"),
    ]
    assert pushed == {"a": "1", "b": "2"}
    from dagrun.store import dag_reads

    with store.read() as conn:
        spec = dag_reads.get_dag(conn, "taskflow").spec
    assert spec.params["greeting"]["default"] == "hello big world"
    assert spec.task_map["inner"].retries == 4, "a group's default_args reach its tasks"
    assert spec.task_map["inner"].group == "grouped"
    assert ("split", "pulled", "checked") in spec.edge_labels
    assert set(spec.task_map["powers"].upstream) == {"add__1", "add__2"}


CALLBACKS = """
import json
from airflow import DAG
from airflow.operators.python import PythonOperator

OUT = {out!r}


def record(context):
    ti = context["ti"]
    entry = [
        ti.task_id,
        str(context["exception"]),
        context["dag_run"].run_id == context["run_id"],
        context["task_instance"].xcom_pull(task_ids="prepare"),
    ]
    with open(OUT, "a") as handle:
        handle.write(json.dumps(entry) + "\\n")


def fail():
    raise ValueError("broken feed")


with DAG("called", schedule=None, on_failure_callback=record):
    prepare = PythonOperator(task_id="prepare", python_callable=lambda: "ready")
    broken = PythonOperator(task_id="broken", python_callable=fail, on_failure_callback=record)
    prepare >> broken
"""


def test_airflow_callbacks_get_airflows_context(store, dags_dir, tmp_path):
    out = tmp_path / "heard.jsonl"
    write_dag(dags_dir, "called.py", CALLBACKS.format(out=str(out)))
    run, _ = run_once(store, dags_dir, "called")
    assert run.state == "failed"
    heard = sorted(json.loads(line) for line in out.read_text().splitlines())
    assert heard == [
        ["", "task(s) failed: broken", True, "ready"],
        ["broken", "ValueError: broken feed", True, "ready"],
    ]


MISSING_FILE = """
from airflow import DAG
from airflow.operators.bash import BashOperator

with DAG("missing", schedule=None):
    BashOperator(task_id="later", bash_command="later.sh")
    BashOperator(task_id="never", bash_command="never.sh")
"""


def test_a_template_file_missing_at_parse_fails_its_task_not_the_file(store, dags_dir):
    """Airflow reads template files when the file is parsed, and a missing one fails the
    task when it renders: the DAG loads, a file made since is found then."""
    path = write_dag(dags_dir, "missing.py", MISSING_FILE)
    from dagrun.parsing.loader import load_file

    assert load_file(str(path))[1] is None
    (dags_dir / "later.sh").write_text("echo made later {{ dag.dag_id }}\n")
    _, tasks = run_once(store, dags_dir, "missing")
    assert (tasks["later"].state, tasks["never"].state) == ("success", "failed")
    assert tasks["never"].last_error == "NonRetryableError: template file 'never.sh' not found"
    assert values(store)["later"] == "made later missing"

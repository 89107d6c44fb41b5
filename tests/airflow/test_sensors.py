"""Airflow's sensors run unchanged (DESIGN 7.1): a file's own BaseSensorOperator subclasses in
poke and reschedule mode, PokeReturnValue's value passed on, soft_fail, timeouts, what a
poke raises, @task.sensor, every built-in sensor, ExternalTaskSensor's states, task ids and
groups, and ExternalTaskMarker followed by ``dagrun clear``, on SQLite and PostgreSQL."""

from __future__ import annotations

import json

import pytest

from dagrun.store import Store
from tests.helpers import run_cli, run_once, write_dag


def values(store: Store, run_pk: int) -> dict[str, object]:
    """Each task's return value in a run (None when it has none)."""
    with store.read() as conn:
        rows = conn.exec_driver_sql(
            f"SELECT task_id, return_value FROM task_instance WHERE run_pk = {run_pk}"
        ).all()
    return {task_id: None if value is None else json.loads(value) for task_id, value in rows}


def outcomes(store: Store, run_pk: int) -> dict[str, list[str]]:
    """Each task's attempts' outcomes, in order."""
    found: dict[str, list[str]] = {}
    with store.read() as conn:
        rows = conn.exec_driver_sql(
            f"SELECT task_id, outcome FROM task_attempt WHERE run_pk = {run_pk} ORDER BY id"
        ).all()
    for task_id, outcome in rows:
        found.setdefault(task_id, []).append(outcome)
    return found


def errors(tasks) -> dict[str, str]:
    return {t: row.last_error for t, row in tasks.items() if row.last_error}


SUBCLASSES = """
from datetime import timedelta
from pathlib import Path

import pendulum
from airflow import DAG
from airflow.decorators import task
from airflow.exceptions import AirflowFailException, AirflowSensorTimeout, AirflowSkipException
from airflow.sensors.base import BaseSensorOperator, PokeReturnValue

FOLDER = Path({folder!r})


def count(name):
    path = FOLDER / name
    n = int(path.read_text()) + 1 if path.exists() else 1
    path.write_text(str(n))
    return n


class ThirdTime(BaseSensorOperator):
    template_fields = ("label",)

    def __init__(self, *, label, **kwargs):
        super().__init__(**kwargs)
        self.label = label

    def poke(self, context):
        n = count(self.task_id)
        return PokeReturnValue(n >= 3, {{"pokes": n, "label": self.label}})


class Never(BaseSensorOperator):
    def poke(self, context):
        return False


class Always(BaseSensorOperator):
    def poke(self, context):
        return {{"ignored": True}}


class Raises(BaseSensorOperator):
    def __init__(self, *, error, **kwargs):
        super().__init__(**kwargs)
        self.error = error

    def poke(self, context):
        if count(self.task_id) == 1:
            raise self.error("first poke")
        return True


with DAG(
    "sensing",
    schedule="@daily",
    start_date=pendulum.datetime(2026, 1, 1),
    default_args={{
        "poke_interval": 0.1, "timeout": 30, "retries": 2, "retry_delay": timedelta(0)
    }},
) as dag:
    poked = ThirdTime(task_id="poked", label="{{{{ ds }}}}")
    rescheduled = ThirdTime(task_id="rescheduled", label="r", mode="reschedule")
    deferred = ThirdTime(task_id="deferred", label="d", deferrable=True)
    always = Always(task_id="always")
    soft = Never(task_id="soft", timeout=0.5, soft_fail=True, mode="reschedule")
    hard = Never(task_id="hard", timeout=timedelta(seconds=0.5))
    skip = Raises(task_id="skip", error=AirflowSkipException)
    fail_soft = Raises(task_id="fail_soft", error=AirflowFailException, soft_fail=True)
    timed_out = Raises(task_id="timed_out", error=AirflowSensorTimeout)
    silent = Raises(task_id="silent", error=ValueError, silent_fail=True)
    never = Raises(task_id="never", error=ValueError, never_fail=True)
    retried = Raises(task_id="retried", error=ValueError)

    @task
    def passed(value):
        return value

    @task.sensor(poke_interval=0.1, timeout=30)
    def zero():
        return PokeReturnValue(is_done=count("zero") >= 2, xcom_value=0)

    @task.sensor(poke_interval=0.1, timeout=30, mode="reschedule")
    def plain(ds):
        return count("plain") >= 2 and ds

    @task.sensor(poke_interval=0.1, timeout=0.3, soft_fail=True)
    def gives_up():
        return False

    passed(rescheduled.output)
    passed.override(task_id="zero_passed")(zero())
    plain()
    gives_up()
"""


@pytest.mark.slow
def test_sensor_subclasses_and_task_sensor_with_airflows_meaning(store, dags_dir, tmp_path):
    (tmp_path / "counts").mkdir()
    write_dag(dags_dir, "sensing.py", SUBCLASSES.format(folder=str(tmp_path / "counts")))
    run, tasks = run_once(store, dags_dir, "sensing")
    states = {t: row.state for t, row in tasks.items()}
    assert states == {
        "poked": "success",
        "rescheduled": "success",
        "deferred": "success",
        "always": "success",
        "soft": "skipped",
        "hard": "failed",
        "skip": "skipped",
        "fail_soft": "skipped",
        "timed_out": "failed",
        "silent": "success",
        "never": "skipped",
        "retried": "success",
        "passed": "success",
        "zero": "success",
        "zero_passed": "success",
        "plain": "success",
        "gives_up": "skipped",
    }, errors(tasks)
    got = values(store, run.id)
    day = run.logical_date.strftime("%Y-%m-%d")
    assert got["poked"] == {"pokes": 3, "label": day}, "the value of a done PokeReturnValue"
    assert got["passed"] == {"pokes": 3, "label": "r"}, "passed downstream"
    assert got["always"] is None, "a plain truthy poke gives no value, as in Airflow"
    assert got["zero"] == 0 and got["zero_passed"] == 0, "a falsy value of a done poke"
    assert got["plain"] is None
    found = outcomes(store, run.id)
    assert found["poked"] == ["success"], "poke mode (Airflow's default) keeps its attempt"
    assert found["rescheduled"] == ["rescheduled", "rescheduled", "success"]
    assert found["deferred"] == found["rescheduled"], "deferrable waits as reschedule does"
    assert found["plain"] == ["rescheduled", "success"]
    assert found["zero"] == ["success"], "@task.sensor pokes in poke mode by default"
    assert found["hard"] == ["timed_out"], "a timeout is not retried"
    assert tasks["hard"].last_error == "sensor timed out after 0.5 s"
    assert found["soft"][-1] == "timed_out" and tasks["soft"].try_number == 1
    assert found["silent"] == ["success"], "silent_fail: an error is taken as 'not yet'"
    assert found["retried"] == ["failed", "success"], "other errors fail the attempt"
    assert found["fail_soft"] == ["skipped"] and found["never"] == ["skipped"]
    assert found["timed_out"] == ["non_retryable"], "AirflowSensorTimeout is not retried"
    assert found["gives_up"] == ["timed_out"]


BUILT_INS = """
from datetime import time, timedelta

import pendulum
from airflow import DAG
from airflow.providers.standard.sensors.bash import BashSensor
from airflow.providers.standard.sensors.filesystem import FileSensor
from airflow.providers.standard.sensors.python import PythonSensor
from airflow.sensors.base import PokeReturnValue
from airflow.sensors.time_delta import TimeDeltaSensor
from airflow.sensors.time_sensor import TimeSensor
from airflow.sensors.weekday import DayOfWeekSensor
from airflow.utils.weekday import WeekDay

FOLDER = {folder!r}


def check(word, times, day, templates_dict=None, **context):
    assert context["task"].task_id == "python_value"
    return PokeReturnValue(True, f"{{word * times}} {{day}} {{templates_dict['when']}}")


with DAG(
    "built_ins",
    schedule="@daily",
    start_date=pendulum.datetime(2026, 1, 1, tz="Asia/Dhaka"),
    default_args={{"poke_interval": 0.1, "timeout": 30, "retries": 2}},
) as dag:
    gives_up = {{"timeout": 0.3, "soft_fail": True}}
    PythonSensor(
        task_id="python_value",
        python_callable=check,
        op_args=["ho"],
        op_kwargs={{"times": 2, "day": "{{{{ ds_nodash }}}}"}},
        templates_dict={{"when": "{{{{ ds }}}}"}},
    )
    PythonSensor(task_id="python_true", python_callable=lambda: "yes")
    BashSensor(task_id="bash_ok", bash_command="test -n \\"$PWD\\" && exit 0")
    BashSensor(
        task_id="bash_env",
        bash_command='test "$ONLY" = "{{{{ ds }}}}" && test -z "$HOME"',
        env={{"ONLY": "{{{{ ds }}}}"}},
    )
    BashSensor(task_id="bash_retry", bash_command="exit 3", retry_exit_code=3, **gives_up)
    BashSensor(task_id="bash_bad", bash_command="exit 4", retry_exit_code=3)
    BashSensor(task_id="bash_any", bash_command="exit 5", **gives_up)
    FileSensor(task_id="file_glob", filepath=FOLDER + "/landing/*.csv")
    FileSensor(task_id="file_templated", filepath=FOLDER + "/landing/{{{{ ds }}}}.csv")
    FileSensor(task_id="file_deep", filepath=FOLDER + "/deep/**/x.txt", recursive=True)
    FileSensor(task_id="file_shallow", filepath=FOLDER + "/deep/**/x.txt", **gives_up)
    FileSensor(task_id="file_folder", filepath=FOLDER + "/deep")
    FileSensor(task_id="file_empty", filepath=FOLDER + "/empty", **gives_up)
    FileSensor(task_id="file_conn", filepath="landing/a.csv", fs_conn_id="my_fs")
    FileSensor.partial(task_id="file_mapped").expand(
        filepath=[FOLDER + "/landing/a.csv", FOLDER + "/deep"]
    )
    TimeSensor(task_id="time_past", target_time=time(0, 0))
    TimeSensor(task_id="time_never", target_time=time(23, 59, 59, 999999), **gives_up)
    TimeDeltaSensor(task_id="delta_past", delta=timedelta(0))
    TimeDeltaSensor(task_id="delta_later", delta=timedelta(days=3650), **gives_up)
    DayOfWeekSensor(task_id="thursday", week_day="Thursday", use_task_logical_date=True)
    DayOfWeekSensor(
        task_id="weekend",
        week_day={{WeekDay.SATURDAY, "sunday"}},
        use_task_logical_date=True,
        **gives_up,
    )
    DayOfWeekSensor(task_id="any_day", week_day=list(WeekDay), mode="reschedule")
"""


@pytest.mark.slow
def test_built_in_sensors_with_airflows_arguments(store, dags_dir, tmp_path, monkeypatch):
    files = tmp_path / "files"
    for folder in ("landing", "deep/a/b", "empty"):
        (files / folder).mkdir(parents=True)
    (files / "landing" / "a.csv").write_text("id\n")
    (files / "landing" / "2026-01-01.csv").write_text("id\n")
    (files / "deep" / "a" / "b" / "x.txt").write_text("x\n")
    monkeypatch.setenv("DAGRUN_CONN_MY_FS", f"fs://?path={files}")
    write_dag(dags_dir, "built_ins.py", BUILT_INS.format(folder=str(files)))
    run, tasks = run_once(store, dags_dir, "built_ins")
    states = {t: row.state for t, row in tasks.items()}
    skipped = {"bash_retry", "bash_any", "file_shallow", "file_empty", "time_never"}
    skipped |= {"delta_later", "weekend"}
    assert states == {
        **dict.fromkeys(states, "success"),
        **dict.fromkeys(skipped, "skipped"),
        "bash_bad": "failed",
    }, errors(tasks)
    got = values(store, run.id)
    assert got["python_value"] == "hoho 20260101 2026-01-01"
    assert got["python_true"] is None
    found = outcomes(store, run.id)
    assert found["bash_bad"] == ["non_retryable"], "an exit code other than retry_exit_code"
    assert tasks["bash_bad"].last_error == "AirflowFailException: Command exited with return code 4"
    assert found["bash_retry"] == ["timed_out"] and found["bash_any"] == ["timed_out"]
    assert found["weekend"] == ["timed_out"], "2026-01-01 in Asia/Dhaka is a Thursday"
    assert found["any_day"] == ["success"]
    with store.read() as conn:
        mapped = conn.exec_driver_sql(
            "SELECT map_index, state FROM task_instance "
            f"WHERE run_pk = {run.id} AND task_id = 'file_mapped' ORDER BY map_index"
        ).all()
    assert [tuple(r) for r in mapped] == [(0, "success"), (1, "success")]


EXTERNAL = """
from datetime import timedelta

import pendulum
from airflow import DAG
from airflow.operators.bash import BashOperator
from airflow.operators.empty import EmptyOperator
from airflow.sensors.external_task import ExternalTaskSensor
from airflow.utils.state import DagRunState, TaskInstanceState
from airflow.utils.task_group import TaskGroup

START = pendulum.datetime(2026, 1, 1)

with DAG("upstream", schedule="@daily", start_date=START):
    EmptyOperator(task_id="load") >> BashOperator(task_id="other", bash_command="echo")
    with TaskGroup("grp"):
        EmptyOperator(task_id="a") >> EmptyOperator(task_id="b")
    BashOperator(task_id="broken", bash_command="exit 1")
    BashOperator(task_id="skipped", bash_command="exit 99")

with DAG(
    "downstream",
    schedule="@daily",
    start_date=START,
    default_args={"poke_interval": 0.1, "timeout": 30, "mode": "reschedule"},
):
    gives_up = {"timeout": 0.5, "soft_fail": True}
    up = {"external_dag_id": "upstream"}
    ExternalTaskSensor(task_id="one_task", external_task_id="load", **up)
    ExternalTaskSensor(task_id="two_tasks", external_task_ids=["load", "other"], **up)
    ExternalTaskSensor(task_id="group", external_task_group_id="grp", **up)
    ExternalTaskSensor(
        task_id="failed",
        external_task_id="broken",
        failed_states=["failed"],
        retries=1,
        retry_delay=timedelta(0),
        **up,
    )
    ExternalTaskSensor(
        task_id="failed_soft",
        external_task_id="broken",
        failed_states=[TaskInstanceState.FAILED],
        soft_fail=True,
        **up,
    )
    ExternalTaskSensor(
        task_id="flipped",
        external_task_id="broken",
        allowed_states=["failed"],
        failed_states=["success"],
        **up,
    )
    ExternalTaskSensor(
        task_id="skip_on_skip", external_task_id="skipped", skipped_states=["skipped"], **up
    )
    ExternalTaskSensor(task_id="waits_on_failure", external_task_id="broken", **gives_up, **up)
    ExternalTaskSensor(task_id="run_failed", allowed_states=[DagRunState.FAILED], **up)
    ExternalTaskSensor(task_id="run_success", **gives_up, **up)
    ExternalTaskSensor(
        task_id="date_fn", external_task_id="load", execution_date_fn=lambda dt, **c: [dt], **up
    )
    ExternalTaskSensor(
        task_id="day_before",
        external_task_id="load",
        execution_delta=timedelta(days=1),
        **gives_up,
        **up,
    )
    ExternalTaskSensor(task_id="missing", external_task_id="nope", check_existence=True, **up)
    ExternalTaskSensor(
        task_id="templated", external_dag_id="{{ 'up' ~ 'stream' }}", external_task_id="load"
    )
"""


@pytest.mark.slow
def test_external_task_sensor_states_task_ids_and_groups(store, dags_dir):
    write_dag(dags_dir, "external.py", EXTERNAL)
    first, _ = run_once(store, dags_dir, "upstream", run_id="up")
    assert first.state == "failed"
    run, tasks = run_once(store, dags_dir, "downstream", run_id="down")
    assert run.logical_date == first.logical_date
    states = {t: row.state for t, row in tasks.items()}
    assert states == {
        **dict.fromkeys(states, "success"),
        "failed": "failed",
        "failed_soft": "skipped",
        "skip_on_skip": "skipped",
        "waits_on_failure": "skipped",
        "run_success": "skipped",
        "day_before": "skipped",
        "missing": "failed",
    }, errors(tasks)
    found = outcomes(store, run.id)
    assert found["failed"] == ["failed", "failed"], "an external failure is retried"
    assert tasks["failed"].last_error == (
        "ExternalTaskFailedError: task 'broken' of DAG 'upstream' at "
        f"{first.logical_date.isoformat()} is failed"
    )
    assert found["waits_on_failure"][-1] == "timed_out", "no failed_states: it waits"
    assert tasks["missing"].last_error.startswith("ExternalTaskNotFoundError: the external task")


MARKERS = """
import pendulum
from airflow import DAG
from airflow.operators.bash import BashOperator
from airflow.operators.empty import EmptyOperator
from airflow.sensors.external_task import ExternalTaskMarker, ExternalTaskSensor

START = pendulum.datetime(2026, 1, 1)
FAST = {"poke_interval": 0.1, "timeout": 30, "mode": "reschedule"}

with DAG("parent", schedule="@daily", start_date=START):
    first = BashOperator(task_id="first", bash_command="echo")
    first >> ExternalTaskMarker(
        task_id="mark", external_dag_id="child", external_task_id="wait_parent"
    )
    EmptyOperator(task_id="aside")

with DAG("child", schedule="@daily", start_date=START, default_args=FAST):
    wait = ExternalTaskSensor(
        task_id="wait_parent", external_dag_id="parent", external_task_id="mark"
    )
    marked = ExternalTaskMarker(
        task_id="mark_child",
        external_dag_id="grandchild",
        external_task_id="wait_child",
        execution_date="{{ execution_date.isoformat() }}",
    )
    wait >> marked >> EmptyOperator(task_id="after")
    EmptyOperator(task_id="independent")

with DAG("grandchild", schedule="@daily", start_date=START, default_args=FAST):
    ExternalTaskSensor(
        task_id="wait_child", external_dag_id="child", external_task_id="mark_child"
    ) >> EmptyOperator(task_id="tail")
    EmptyOperator(task_id="alone")

with DAG("shallow", schedule="@daily", start_date=START):
    ExternalTaskMarker(
        task_id="mark", external_dag_id="child", external_task_id="wait_parent", recursion_depth=1
    )
"""


def task_states(store: Store) -> dict[tuple[str, str], str]:
    with store.read() as conn:
        rows = conn.exec_driver_sql(
            "SELECT r.dag_id, t.task_id, t.state FROM task_instance t "
            "JOIN dag_run r ON r.id = t.run_pk"
        ).all()
    return {(dag_id, task_id): state for dag_id, task_id, state in rows}


@pytest.mark.slow
def test_clearing_a_marker_clears_the_marked_tasks_downstream(store, db_url, dags_dir, cli_env):
    write_dag(dags_dir, "markers.py", MARKERS)
    for dag_id in ("parent", "child", "grandchild", "shallow"):
        run, tasks = run_once(store, dags_dir, dag_id, run_id=dag_id)
        assert run.state == "success", errors(tasks)
    env = {**cli_env, "DAGRUN_DB_URL": db_url}
    before = task_states(store)
    day = ("--start", "2026-01-01", "--end", "2026-01-01", "-y")
    too_deep = run_cli("clear", "shallow", *day, env=env)
    assert too_deep.returncode == 2, too_deep.stdout + too_deep.stderr
    assert "at most 1 DAGs deep: marker 'mark_child' of DAG 'child'" in too_deep.stderr
    assert task_states(store) == before, "nothing cleared"

    done = run_cli("clear", "parent", *day, "--tasks", "^first$", "--downstream", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "cleared 2 task instance(s) in 1 run(s), 3 of child (marked), 2 of grandchild" in (
        done.stdout
    )
    cleared = {k for k, state in task_states(store).items() if state != "success"}
    assert cleared == {
        ("parent", "first"),
        ("parent", "mark"),
        ("child", "wait_parent"),
        ("child", "mark_child"),
        ("child", "after"),
        ("grandchild", "wait_child"),
        ("grandchild", "tail"),
    }
    with store.read() as conn:
        audited = conn.exec_driver_sql(
            "SELECT dag_id FROM audit_log WHERE action = 'clear' ORDER BY id"
        ).all()
    assert [r[0] for r in audited] == ["parent", "child", "grandchild"]

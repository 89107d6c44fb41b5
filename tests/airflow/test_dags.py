"""Airflow's DAG arguments and graph-shaping calls build the task graph Airflow would
(DESIGN 7.1): defaults of the 2.x and 3.x lines, the zone of the start date, default_args,
@dag, ids, chains, labels, groups, setup and teardown; arguments dagrun does not act on
are warnings, never refusals. Parsed in this process, without a database."""

from __future__ import annotations

import pytest

from dagrun.parsing.loader import load_file
from tests.helpers import write_dag


def parse(dags_dir, source: str, name: str = "dag.py"):
    """The file's specs by DAG id, and its error (None when it loads)."""
    specs, error = load_file(str(write_dag(dags_dir, name, source)))
    return {s.dag_id: s for s in specs}, error


def test_airflow_2_and_3_defaults_differ_as_their_lines_do(dags_dir):
    specs, error = parse(
        dags_dir,
        """
        import pendulum
        from airflow import DAG
        from airflow.operators.empty import EmptyOperator
        from airflow.sdk import DAG as Dag3

        start = pendulum.datetime(2026, 1, 1, tz="Europe/Amsterdam")
        with DAG("two", start_date=start):
            EmptyOperator(task_id="t")
        with Dag3("three", start_date=start):
            EmptyOperator(task_id="t")
        with Dag3("three_cron", start_date=start, schedule="@daily"):
            EmptyOperator(task_id="t")
        with DAG("two_cron", start_date=start, schedule_interval="0 3 * * *"):
            EmptyOperator(task_id="t")
        """,
    )
    assert error is None
    two, three = specs["two"], specs["three"]
    assert (two.schedule, two.catchup, two.timezone) == (86400.0, True, "Europe/Amsterdam")
    assert (three.schedule, three.catchup) == (None, False)
    assert specs["three_cron"].schedule["kind"] == "cron_trigger"
    assert specs["two_cron"].schedule == "0 3 * * *"
    first = specs["three_cron"].timetable.next_interval(None)
    assert first.start == first.end, "Airflow 3: the logical date of a cron run is its fire"


def test_default_args_give_the_start_date_and_the_tasks_their_options(dags_dir):
    specs, error = parse(
        dags_dir,
        """
        from datetime import datetime, timedelta
        from airflow.models.dag import DAG
        from airflow.operators.bash import BashOperator

        args = {
            "owner": "data",
            "start_date": datetime(2026, 3, 1),
            "retries": 3,
            "retry_delay": timedelta(minutes=2),
            "execution_timeout": timedelta(hours=1),
            "pool": "default_pool",
            "queue": "fast",
            "env": {"FROM_DEFAULTS": "1"},
        }
        with DAG("defaults", default_args=args, schedule="@hourly") as dag:
            first = BashOperator(task_id="first", bash_command="echo $FROM_DEFAULTS")
            own = BashOperator(task_id="own", bash_command="echo", retries=0, env={"A": "b"})
        """,
    )
    assert error is None
    spec = specs["defaults"]
    assert spec.start_date == "2026-03-01T00:00:00+00:00"
    first, own = spec.task_map["first"], spec.task_map["own"]
    assert (first.retries, first.retry_delay, first.execution_timeout) == (3, 120.0, 3600.0)
    assert first.retry_exponential_backoff is False, "Airflow's default: no backoff"
    assert first.pool is None, "default_pool is no pool in dagrun"
    assert own.retries == 0


def test_arguments_dagrun_does_not_act_on_are_warnings_once_each_with_their_lines(dags_dir):
    path = write_dag(
        dags_dir,
        "warned.py",
        """
        from airflow import DAG
        from airflow.operators.empty import EmptyOperator

        with DAG(
            "warned",
            schedule=None,
            default_args={"owner": "data", "queue": "fast"},
            access_control={"role": {"can_read"}},
        ) as dag:
            EmptyOperator(task_id="a", sla=None, weight_rule="absolute")
            EmptyOperator(task_id="b", weight_rule="absolute")
        """,
    )
    from dagrun.parsing.loader import import_file

    (dag,) = import_file(str(path))
    messages = [(line, text.split(":")[0]) for line, text in dag.warnings]
    assert sorted(m for _, m in messages) == ["access_control", "owner", "queue", "weight_rule"]
    assert dict((m, line) for line, m in messages)["access_control"] == 4, "the DAG call"
    assert ("weight_rule", 10) in [(m, line) for line, m in messages], "its first task's line"
    assert len({text for _, text in dag.warnings}) == len(dag.warnings), "once each"


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        ('DAG("d", schedule=None, colour="red")', "DAG 'd': invalid argument 'colour'"),
        ('DAG("d", schedule="@continuous")', "schedule '@continuous' is not provided"),
        (
            'DAG("d", schedule=None, schedule_interval="@daily")',
            "give one of schedule, schedule_interval and timetable",
        ),
    ],
)
def test_a_dag_argument_dagrun_cannot_honour_is_a_clear_import_error(dags_dir, call, expected):
    _, error = parse(
        dags_dir,
        f"""
        from airflow import DAG
        from airflow.operators.empty import EmptyOperator

        with {call}:
            EmptyOperator(task_id="t")
        """,
    )
    assert error is not None and expected in error.reason


def test_an_unknown_operator_argument_names_the_task(dags_dir):
    _, error = parse(
        dags_dir,
        """
        from airflow import DAG
        from airflow.operators.empty import EmptyOperator

        with DAG("d", schedule=None):
            EmptyOperator(task_id="t", retires=3)
        """,
    )
    assert error is not None
    assert "task 't' in DAG 'd': invalid argument 'retires'" in error.reason


def test_the_dag_decorator_takes_its_id_doc_and_params_from_the_function(dags_dir):
    specs, error = parse(
        dags_dir,
        """
        import pendulum
        from airflow.decorators import dag, task
        from airflow.models.param import Param

        @dag(schedule=None, start_date=pendulum.datetime(2026, 1, 1),
             params={"limit": Param(5, type="integer", minimum=1)})
        def reporting(region: str = "eu", days: int = 7):
            '''Daily report per region.'''

            @task
            def report(region, days, params=None):
                return [region, days, params["limit"]]

            report(region, days)

        reporting()
        reporting.__wrapped__  # the decorated function stays reachable
        """,
    )
    assert error is None
    spec = specs["reporting"]
    assert {k: v.get("default") for k, v in spec.params.items()} == {
        "region": "eu",
        "days": 7,
        "limit": 5,
    }
    assert spec.params["limit"]["schema"] == {"type": "integer", "minimum": 1}


def test_graph_shaping_calls_make_airflows_edges(dags_dir):
    specs, error = parse(
        dags_dir,
        """
        from airflow import DAG
        from airflow.models.baseoperator import chain, chain_linear, cross_downstream
        from airflow.operators.empty import EmptyOperator as E
        from airflow.utils.edgemodifier import Label
        from airflow.utils.task_group import TaskGroup

        with DAG("shapes", schedule=None):
            a, b, c, d, e, f, g = (E(task_id=x) for x in "abcdefg")
            chain(a, [b, c], [d, e], f)
            chain_linear(f, [g, E(task_id="h")], E(task_id="i"))
            cross_downstream([E(task_id="x1"), E(task_id="x2")], [E(task_id="y1"), E(task_id="y2")])
            yes = E(task_id="yes")
            a >> Label("when ok") >> yes
            with TaskGroup("grp") as grp:
                E(task_id="in1") >> E(task_id="in2")
            with TaskGroup("flat", prefix_group_id=False):
                E(task_id="bare")
            yes >> grp
        """,
    )
    assert error is None
    up = {t.task_id: set(t.upstream) for t in specs["shapes"].tasks}
    assert up["b"] == up["c"] == {"a"}
    assert (up["d"], up["e"], up["f"]) == ({"b"}, {"c"}, {"d", "e"})
    assert up["g"] == up["h"] == {"f"} and up["i"] == {"g", "h"}
    assert up["y1"] == up["y2"] == {"x1", "x2"}
    assert up["grp.in1"] == {"yes"} and up["grp.in2"] == {"grp.in1"}
    assert "bare" in up
    assert specs["shapes"].edge_labels == (("a", "yes", "when ok"),)


def test_setup_and_teardown_as_airflow_writes_them(dags_dir):
    specs, error = parse(
        dags_dir,
        """
        from airflow.sdk import DAG, setup, task, teardown
        from airflow.operators.bash import BashOperator

        with DAG("resources", schedule=None):
            create = BashOperator(task_id="create", bash_command="echo made")
            query = BashOperator(task_id="query", bash_command="echo q")
            delete = BashOperator(task_id="delete", bash_command="echo gone")
            create >> query >> delete.as_teardown(setups=create)

            @setup
            def start_cluster():
                return "cluster"

            @teardown
            def stop_cluster():
                return None

            @task
            def work():
                return 1

            with stop_cluster().as_teardown(setups=start_cluster()):
                work()
        """,
    )
    assert error is None
    tasks = specs["resources"].task_map
    assert tasks["create"].is_setup and tasks["delete"].is_teardown
    assert tasks["delete"].trigger_rule == "all_done_setup_success"
    assert set(tasks["delete"].upstream) == {"create", "query"}
    assert tasks["start_cluster"].is_setup and tasks["stop_cluster"].is_teardown
    assert set(tasks["work"].upstream) == {"start_cluster"}
    assert set(tasks["stop_cluster"].upstream) == {"start_cluster", "work"}

"""Tests for the authoring API of DESIGN section 2 (dagrun.authoring.dag, tasks and
taskflow), without a database."""

from __future__ import annotations

from datetime import timedelta

import pytest

from dagrun import DAG, BashTask, PythonTask, task
from dagrun.authoring.context_names import CONTEXT_NAMES
from dagrun.authoring.options import TASK_DEFAULTS
from dagrun.authoring.tasks import TaskOutput
from dagrun.errors import DagDefinitionError, ScheduleError, UsageError


def upstream(dag: DAG, task_id: str) -> set[str]:
    return set(dag.tasks[task_id].upstream_ids)


def bash(task_id: str, **options) -> BashTask:
    return BashTask(task_id, command=f"echo {task_id}", **options)


# ---------------------------------------------------------------- building DAGs


def test_with_dag_collects_tasks_in_definition_order():
    with DAG("pipeline", schedule="@daily", start_date="2026-01-01", tags=["x"]) as dag:
        bash("b")
        bash("a")
        bash("c")
    assert list(dag.tasks) == ["b", "a", "c"]
    assert all(t.dag is dag for t in dag.tasks.values())
    assert dag.dag_id == "pipeline"
    assert dag.tags == ["x"]
    assert dag.timezone == "UTC"
    assert dag.max_active_runs == 16
    assert dag.fileloc == __file__


def test_task_created_with_dag_argument_outside_the_context():
    dag = DAG("explicit")
    created = BashTask("t", command="true", dag=dag)
    assert dag.tasks == {"t": created}


def test_task_decorator_without_options_uses_defaults():
    with DAG("d") as dag:

        @task
        def extract(ds):
            return ds

        out = extract()
    assert isinstance(out, TaskOutput)
    created = dag.tasks["extract"]
    assert isinstance(created, PythonTask)
    assert created.kind == "python"
    assert created.python_callable is extract.function
    assert created.options == TASK_DEFAULTS


def test_task_decorator_with_options():
    with DAG("d") as dag:

        @task(retries=5, trigger_rule="all_done", retry_delay="1m", task_id="renamed")
        def build_summary(ds):
            return ds

        build_summary()
    options = dag.tasks["renamed"].options
    assert options["retries"] == 5
    assert options["trigger_rule"] == "all_done"
    assert options["retry_delay"] == 60.0
    assert "build_summary" not in dag.tasks


def test_bash_task_keeps_command_env_and_cwd():
    with DAG("d") as dag:
        t = BashTask("load", command="python load.py --date {{ ds }}", env={"N": 3}, cwd="/tmp")
    assert dag.tasks["load"] is t
    assert t.kind == "bash"
    assert t.command == "python load.py --date {{ ds }}"
    assert t.env == {"N": "3"}
    assert t.cwd == "/tmp"


@pytest.mark.parametrize("command", ["", "   ", None, 42])
def test_bash_task_needs_a_command(command):
    with DAG("d"), pytest.raises(DagDefinitionError, match="'load'"):
        BashTask("load", command=command)


# ---------------------------------------------------------------- dependencies


def test_shift_operators_between_tasks():
    with DAG("d") as dag:
        a, b, c, d = bash("a"), bash("b"), bash("c"), bash("d")
        result = a >> b
        c << b
        d << c << a
    assert result is b
    assert upstream(dag, "a") == set()
    assert upstream(dag, "b") == {"a"}
    assert upstream(dag, "c") == {"b", "a"}
    assert upstream(dag, "d") == {"c"}


def test_chains_return_the_right_hand_side():
    with DAG("d") as dag:
        a, b, c = bash("a"), bash("b"), bash("c")
        a >> b >> c
    assert upstream(dag, "b") == {"a"}
    assert upstream(dag, "c") == {"b"}


@pytest.mark.parametrize(
    "wire",
    [
        lambda a, b, c: [a, b] >> c,
        lambda a, b, c: c << [a, b],
        lambda a, b, c: (a, b) >> c,
        lambda a, b, c: [a] >> c << [b],
    ],
    ids=["list-rshift", "lshift-list", "tuple-rshift", "both-sides"],
)
def test_fan_in_from_lists(wire):
    with DAG("d") as dag:
        wire(bash("a"), bash("b"), bash("c"))
    assert upstream(dag, "c") == {"a", "b"}
    assert upstream(dag, "a") == upstream(dag, "b") == set()


@pytest.mark.parametrize(
    "wire",
    [lambda a, b, c: a >> [b, c], lambda a, b, c: [b, c] << a],
    ids=["rshift-list", "list-lshift"],
)
def test_fan_out_to_lists(wire):
    with DAG("d") as dag:
        wire(bash("a"), bash("b"), bash("c"))
    assert upstream(dag, "b") == upstream(dag, "c") == {"a"}
    assert upstream(dag, "a") == set()


def test_repeated_edges_are_recorded_once():
    with DAG("d") as dag:
        a, b = bash("a"), bash("b")
        a >> b
        b << a
        [a, a] >> b
    assert dag.tasks["b"].upstream_ids == ["a"]


def test_outputs_and_called_task_functions_in_dependencies():
    """The DESIGN example: ``extract() >> summary()`` then ``load >> summary``."""
    with DAG("nightly") as dag:

        @task
        def extract_sales(ds, data_interval_start, data_interval_end):
            return ds

        @task(retries=5, trigger_rule="all_done")
        def build_summary(ds):
            return ds

        load = BashTask("load_customers", command="python load.py --date {{ ds }}")
        extract_sales() >> build_summary()
        load >> build_summary
    assert upstream(dag, "build_summary") == {"extract_sales", "load_customers"}
    assert dag.tasks["build_summary"].data_inputs == []


@pytest.mark.parametrize(
    "wire",
    [
        lambda fn, a, b: [a, b] >> fn,
        lambda fn, a, b: fn << [a, b],
        lambda fn, a, b: (a >> fn, b >> fn),
        lambda fn, a, b: (fn << a, fn << b),
    ],
    ids=["list-rshift-fn", "fn-lshift-list", "task-rshift-fn", "fn-lshift-task"],
)
def test_task_function_as_downstream(wire):
    with DAG("d") as dag:

        @task
        def summary():
            return 1

        summary()
        wire(summary, bash("a"), bash("b"))
    assert upstream(dag, "summary") == {"a", "b"}


def test_task_function_as_upstream():
    with DAG("d") as dag:

        @task
        def first():
            return 1

        first()
        a, b = bash("a"), bash("b")
        first >> [a, b]
        b << first
    assert upstream(dag, "a") == upstream(dag, "b") == {"first"}


def test_task_function_refers_to_its_latest_call():
    with DAG("d") as dag:

        @task
        def step():
            return 1

        step()
        step()
        step >> bash("after")
    assert upstream(dag, "after") == {"step__1"}


def test_task_function_used_before_it_was_called_is_an_error():
    with DAG("d"):

        @task
        def never_called():
            return 1

        with pytest.raises(DagDefinitionError, match="never_called"):
            bash("a") >> never_called


def test_dependency_on_a_non_task_is_a_type_error():
    with DAG("d"):
        a = bash("a")
        with pytest.raises(TypeError, match="cannot set a dependency"):
            a >> "b"


def test_dependency_across_dags_is_refused():
    with DAG("one"):
        a = bash("a")
    with DAG("two"):
        b = bash("b")
        with pytest.raises(DagDefinitionError, match=r"task 'b' in DAG 'two'.*another DAG 'one'"):
            a >> b


# ---------------------------------------------------------------- TaskFlow


def test_taskflow_call_adds_edge_and_data_input():
    with DAG("d") as dag:

        @task
        def extract():
            return {"rows": 1}

        @task
        def clean(raw, ds):
            return raw

        @task
        def merge(left, right=None, *, ds=None):
            return [left, right]

        raw = extract()
        cleaned = clean(raw)
        merge(cleaned, right=raw)
    assert upstream(dag, "clean") == {"extract"}
    assert dag.tasks["clean"].data_inputs == ["extract"]
    assert upstream(dag, "merge") == {"clean", "extract"}
    assert dag.tasks["merge"].data_inputs == ["clean", "extract"]
    assert dag.tasks["extract"].data_inputs == []


def test_plain_arguments_are_not_data_inputs():
    with DAG("d") as dag:

        @task
        def scale(factor, ds):
            return factor

        scale(3)
    assert dag.tasks["scale"].data_inputs == []
    assert dag.tasks["scale"].args == (3,)


def test_repeated_calls_get_numbered_ids():
    with DAG("d") as dag:

        @task
        def fetch(part):
            return part

        outputs = [fetch(p) for p in ("eu", "us", "asia")]
    assert list(dag.tasks) == ["fetch", "fetch__1", "fetch__2"]
    assert [o.task.task_id for o in outputs] == ["fetch", "fetch__1", "fetch__2"]
    assert fetch.last_task().task_id == "fetch__2"


def test_same_task_function_in_two_dags_starts_over_in_each():
    @task
    def step():
        return 1

    with DAG("one") as one:
        step()
    with DAG("two") as two:
        step()
    assert list(one.tasks) == ["step"]
    assert list(two.tasks) == ["step"]


# ---------------------------------------------------------------- options


def test_default_args_merge_under_task_options():
    default_args = {"retries": 3, "retry_delay": 10, "max_retry_delay": "10m", "pool": "db"}
    with DAG("d", default_args=default_args) as dag:
        plain = bash("plain")
        own = bash("own", retries=1, trigger_rule="one_failed", pool=None)
    assert plain.options["retries"] == 3
    assert plain.options["retry_delay"] == 10.0
    assert plain.options["max_retry_delay"] == 600.0
    assert plain.options["pool"] == "db"
    assert plain.options["trigger_rule"] == "all_success"
    assert own.options["retries"] == 1
    assert own.options["trigger_rule"] == "one_failed"
    assert own.options["pool"] is None
    assert own.options["max_retry_delay"] == 600.0
    assert set(own.options) == set(TASK_DEFAULTS)
    assert dag.default_args["max_retry_delay"] == 600.0


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(30, 30.0), (2.5, 2.5), ("90s", 90.0), ("1h30m", 5400.0), (timedelta(minutes=2), 120.0)],
)
def test_durations_become_seconds(value, seconds):
    with DAG("d"):
        t = bash("t", retry_delay=value, execution_timeout=value)
    assert t.options["retry_delay"] == seconds
    assert t.options["execution_timeout"] == seconds


# ---------------------------------------------------------------- validation


def test_unknown_context_name_is_an_error_naming_the_task():
    with DAG("d"):

        @task
        def report(ds, partition_date):
            return ds

        with pytest.raises(DagDefinitionError) as info:
            report()
    message = str(info.value)
    assert "task 'report' in DAG 'd'" in message
    assert "'partition_date'" in message
    assert info.value.task_id == "report"
    assert info.value.dag_id == "d"


@pytest.mark.parametrize("name", sorted(CONTEXT_NAMES))
def test_every_context_name_is_accepted(name):
    namespace: dict = {}
    exec(f"def f({name}):\n    return {name}\n", namespace)
    with DAG("d") as dag:
        task(namespace["f"])()
    assert "f" in dag.tasks


def test_parameters_with_defaults_or_varargs_are_not_context_names():
    with DAG("d") as dag:

        @task
        def flexible(ds, limit=10, *args, **kwargs):
            return ds

        flexible()
    assert "flexible" in dag.tasks


def test_too_many_arguments_is_an_error_naming_the_task():
    with DAG("d"):

        @task
        def one(x):
            return x

        with pytest.raises(DagDefinitionError, match="task 'one' in DAG 'd': bad arguments"):
            one(1, 2)


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"retrys": 3}, "unknown option 'retrys'"),
        ({"trigger_rule": "any_success"}, "bad trigger_rule 'any_success'"),
        ({"retries": -1}, "retries must be a whole number"),
        ({"retries": 1.5}, "retries must be a whole number"),
        ({"retries": True}, "retries must be a whole number"),
        ({"retry_delay": "soon"}, "retry_delay: invalid duration 'soon'"),
        ({"execution_timeout": -5}, "execution_timeout: invalid duration"),
        ({"priority_weight": "high"}, "priority_weight must be a whole number"),
        ({"priority_weight": False}, "priority_weight must be a whole number"),
    ],
)
def test_bad_task_option_is_an_error_naming_the_task(options, expected):
    with DAG("d"), pytest.raises(DagDefinitionError) as info:
        bash("load", **options)
    assert "task 'load' in DAG 'd'" in str(info.value)
    assert expected in str(info.value)


def test_bad_task_option_in_decorator_names_the_task():
    with DAG("d"):

        @task(trigger_rule="sometimes")
        def flaky():
            return 1

        with pytest.raises(DagDefinitionError, match="task 'flaky' in DAG 'd': bad trigger_rule"):
            flaky()


def test_bad_default_args_name_the_dag():
    with pytest.raises(DagDefinitionError, match="DAG 'd': unknown option 'retires'"):
        DAG("d", default_args={"retires": 2})


@pytest.mark.parametrize(
    "task_id",
    ["a b", "a/b", "../up", "", "x" * 201, "naïve", "a:b", "tab\t", "q?", "#h", None, 5],
)
def test_unsafe_task_ids_are_refused(task_id):
    with DAG("d"), pytest.raises(DagDefinitionError) as info:
        BashTask(task_id, command="true")
    assert repr(task_id) in str(info.value)
    assert "letters, digits" in str(info.value)


@pytest.mark.parametrize("task_id", ["a", "A-b_c.d", "0", "x" * 200, "v1.2-final"])
def test_safe_task_ids_are_accepted(task_id):
    with DAG("d") as dag:
        BashTask(task_id, command="true")
    assert list(dag.tasks) == [task_id]


@pytest.mark.parametrize("dag_id", ["my dag", "a/b", "", "über", None])
def test_unsafe_dag_ids_are_refused(dag_id):
    with pytest.raises(DagDefinitionError, match="DAG id"):
        DAG(dag_id)


def test_unsafe_task_id_from_decorator_is_refused():
    with DAG("d"):

        @task(task_id="has space")
        def f():
            return 1

        with pytest.raises(DagDefinitionError, match="'has space'"):
            f()


def test_duplicate_task_id_is_an_error_naming_the_task():
    with DAG("d") as dag:
        bash("load")
        with pytest.raises(DagDefinitionError) as info:
            bash("load")
    assert "task 'load' in DAG 'd'" in str(info.value)
    assert "duplicate task id 'load'" in str(info.value)
    assert list(dag.tasks) == ["load"]


def test_task_outside_a_dag_is_an_error_naming_the_task():
    with pytest.raises(DagDefinitionError, match="task 'orphan': created outside a DAG"):
        BashTask("orphan", command="true")


def test_task_function_called_outside_a_dag_is_an_error_naming_the_task():
    @task
    def lonely():
        return 1

    with pytest.raises(DagDefinitionError, match="task 'lonely': called outside a DAG"):
        lonely()


def test_dag_context_ends_with_the_with_block():
    with DAG("d"):
        bash("inside")
    with pytest.raises(DagDefinitionError, match="outside a DAG"):
        bash("after")


def test_nested_dag_contexts_use_the_innermost():
    with DAG("outer") as outer:
        with DAG("inner") as inner:
            bash("i")
        bash("o")
    assert list(inner.tasks) == ["i"]
    assert list(outer.tasks) == ["o"]


@pytest.mark.parametrize("value", [0, -1, "3", 1.5, None, True])
def test_bad_max_active_runs_is_refused(value):
    with pytest.raises(DagDefinitionError, match="DAG 'd': max_active_runs"):
        DAG("d", max_active_runs=value)


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"schedule": "61 * * * *", "start_date": "2026-01-01"}, "invalid cron expression"),
        ({"schedule": "@daily", "start_date": "2026-01-01", "timezone": "Mars/X"}, "timezone"),
        ({"schedule": "@daily"}, "start_date is required"),
        ({"schedule": "@daily", "start_date": "soon"}, "invalid start_date 'soon'"),
    ],
)
def test_bad_schedule_is_a_usage_error(kwargs, expected):
    with pytest.raises(ScheduleError, match=expected):
        DAG("d", **kwargs)


def test_definition_errors_are_usage_and_value_errors():
    assert issubclass(DagDefinitionError, UsageError)
    assert issubclass(DagDefinitionError, ValueError)


def test_options_set_as_attributes_after_the_task_was_made_are_kept_and_checked():
    """Airflow files set ``t.trigger_rule = ...`` after construction: it must count."""
    with DAG("d") as dag:
        load = bash("load")
        load.trigger_rule = "none_failed"
        load.retries = 2
        load.retry_delay = timedelta(minutes=1)
        with pytest.raises(DagDefinitionError, match="task 'load' in DAG 'd': bad trigger_rule"):
            load.trigger_rule = "sometimes"
    assert dag.tasks["load"].options["trigger_rule"] == "none_failed"
    assert (load.trigger_rule, load.retries, load.retry_delay) == ("none_failed", 2, 60.0)
    from dagrun.parsing.loader import build_spec

    spec = build_spec(dag, "/dags/d.py").task_map["load"]
    assert (spec.trigger_rule, spec.retries, spec.retry_delay) == ("none_failed", 2, 60.0)

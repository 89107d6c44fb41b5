"""Tests for setup and teardown tasks while a DAG file is imported (as_setup, as_teardown,
@setup, @teardown, their ``with`` blocks, task groups), trigger rule names, and the
short-circuit's reach; what the parser records of them. No database."""

from __future__ import annotations

import json

import pytest

from dagrun import DAG, BashTask, PythonTask, TaskGroup, TriggerRule, setup, task, teardown
from dagrun.authoring.tasks import TaskOutput
from dagrun.errors import DagDefinitionError
from dagrun.parsing import loader
from dagrun.parsing.spec import DagSpec
from tests.helpers import write_dag


def noop() -> None:
    pass


def bash(task_id: str, **options) -> BashTask:
    return BashTask(task_id, command="echo", **options)


def upstream(dag: DAG) -> dict[str, set[str]]:
    return {task_id: set(t.upstream_ids) for task_id, t in dag.tasks.items()}


def roles(dag: DAG) -> dict[str, str]:
    return {
        task_id: "setup" if t.is_setup else "teardown" if t.is_teardown else "work"
        for task_id, t in dag.tasks.items()
    }


# ---------------------------------------------------------------- marking tasks


def test_as_setup_and_as_teardown_return_the_task_for_chains():
    with DAG("d") as dag:
        create = bash("create")
        work = bash("work")
        drop = bash("drop")
        chained = create.as_setup() >> work >> drop.as_teardown(setups=create)
    assert chained is drop
    assert upstream(dag) == {"create": set(), "work": {"create"}, "drop": {"work", "create"}}
    assert roles(dag) == {"create": "setup", "work": "work", "drop": "teardown"}
    assert drop.trigger_rule == TriggerRule.ALL_DONE_SETUP_SUCCESS
    assert drop.on_failure_fail_dagrun is False
    assert create.trigger_rule == work.trigger_rule == "all_success"


def test_as_teardown_marks_its_setups_and_takes_lists_and_outputs():
    @task
    def make(name):
        return name

    with DAG("d") as dag:
        a, b = make("a"), make("b")
        drop = bash("drop").as_teardown(setups=[a, b.task], on_failure_fail_dagrun=True)
    assert roles(dag) == {"make": "setup", "make__1": "setup", "drop": "teardown"}
    assert upstream(dag)["drop"] == {"make", "make__1"}
    assert drop.on_failure_fail_dagrun is True


def test_a_task_output_marks_its_task_and_returns_itself():
    @task
    def make():
        return 1

    @task
    def drop():
        pass

    with DAG("d") as dag:
        made = make().as_setup()
        dropped = drop().as_teardown(setups=made)
    assert isinstance(made, TaskOutput) and isinstance(dropped, TaskOutput)
    assert roles(dag) == {"make": "setup", "drop": "teardown"}
    assert upstream(dag)["drop"] == {"make"}


def test_on_failure_fail_dagrun_left_unsaid_keeps_what_the_task_says():
    @teardown(on_failure_fail_dagrun=True)
    def drop():
        pass

    with DAG("d"):
        out = drop()
        out.as_teardown(setups=bash("create"))
        assert out.task.on_failure_fail_dagrun is True
        out.as_teardown(on_failure_fail_dagrun=False)
        assert out.task.on_failure_fail_dagrun is False


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: bash("t").as_setup().as_teardown(), "is a setup task and cannot also be a"),
        (lambda: bash("t").as_teardown().as_setup(), "is a teardown task and cannot also be"),
        (
            lambda: setattr(bash("t"), "on_failure_fail_dagrun", True),
            "on_failure_fail_dagrun=True needs a teardown task",
        ),
        (
            lambda: bash("t").as_teardown(on_failure_fail_dagrun="yes"),
            "on_failure_fail_dagrun must be True or False, not 'yes'",
        ),
        (
            lambda: setattr(bash("t").as_teardown(), "trigger_rule", "all_done"),
            "a teardown's trigger rule is all_done_setup_success, not 'all_done'",
        ),
    ],
)
def test_misused_marks_are_errors_naming_the_task(build, message):
    with DAG("d"), pytest.raises(DagDefinitionError, match=message) as caught:
        build()
    assert caught.value.task_id == "t"


def test_setting_a_teardowns_own_rule_again_is_allowed():
    with DAG("d"):
        drop = bash("drop").as_teardown()
        drop.trigger_rule = "all_done_setup_success"
    assert drop.trigger_rule == "all_done_setup_success"


# ---------------------------------------------------------------- @setup and @teardown


def test_setup_and_teardown_decorators_mark_every_task_they_add():
    @setup
    def create():
        return "cluster"

    @teardown
    def delete(cluster):
        pass

    @setup(retries=2, task_id="make_bucket")
    def bucket():
        pass

    @task
    def query(cluster):
        pass

    with DAG("d") as dag:
        cluster = create()
        query(cluster) >> delete(cluster)
        bucket()
    assert roles(dag) == {
        "create": "setup",
        "query": "work",
        "delete": "teardown",
        "make_bucket": "setup",
    }
    assert upstream(dag)["delete"] == {"create", "query"}  # its setup through its argument
    assert dag.tasks["make_bucket"].retries == 2
    assert dag.tasks["delete"].trigger_rule == "all_done_setup_success"


def test_setup_and_teardown_go_above_task():
    @setup
    @task(retries=3)
    def create():
        pass

    @teardown(on_failure_fail_dagrun=True)
    @task(task_id="remove")
    def delete():
        pass

    with DAG("d") as dag:
        create() >> delete()
    assert roles(dag) == {"create": "setup", "remove": "teardown"}
    assert dag.tasks["create"].retries == 3
    assert dag.tasks["remove"].on_failure_fail_dagrun is True


@pytest.mark.parametrize(
    ("decorate", "message"),
    [
        (lambda f: teardown(trigger_rule="all_done")(f), "is not an option"),
        (lambda f: teardown(task(trigger_rule="all_done")(f)), "is not an option"),
        (lambda f: setup(retries=1)(task(f)), "takes no options of its own"),
        (lambda f: teardown(on_failure_fail_dagrun=1)(f), "must be True or False, not 1"),
    ],
)
def test_bad_decorator_options_are_errors(decorate, message):
    def f():
        pass

    with pytest.raises(DagDefinitionError, match=message):
        decorate(f)


# ---------------------------------------------------------------- with blocks


def test_with_a_teardown_puts_the_blocks_work_between_its_setups_and_it():
    with DAG("d") as dag:
        create = bash("create")
        with bash("delete").as_teardown(setups=create) as scope:
            bash("q1") >> bash("report")
            bash("q2") >> bash("report__other")
            bash("alone")
    assert scope.owner is dag.tasks["delete"]
    assert upstream(dag) == {
        "create": set(),
        "delete": {"create", "report", "report__other", "alone"},
        "q1": {"create"},
        "report": {"q1"},
        "q2": {"create"},
        "report__other": {"q2"},
        "alone": {"create"},
    }


def test_with_setup_shift_teardown_uses_the_teardown_and_its_setup():
    @setup
    def create():
        pass

    @teardown
    def delete():
        pass

    @task
    def work():
        pass

    with DAG("d") as dag, create() >> delete():
        work()
    assert upstream(dag) == {"create": set(), "delete": {"create", "work"}, "work": {"create"}}


def test_with_a_setup_puts_its_teardowns_after_the_work():
    with DAG("d") as dag:
        create = bash("create").as_setup()
        bash("drop").as_teardown(setups=create)
        with create:
            bash("work")
    assert upstream(dag)["work"] == {"create"}
    assert upstream(dag)["drop"] == {"create", "work"}


def test_a_setup_without_teardown_opens_a_block_for_its_roots_only():
    with DAG("d") as dag, bash("create").as_setup():
        bash("a") >> bash("b")
    assert upstream(dag) == {"create": set(), "a": {"create"}, "b": {"a"}}


def test_nested_blocks_order_the_setups_and_the_teardowns():
    with (  # one block inside the other: the second is made and closed inside the first
        DAG("d") as dag,
        bash("drop_db").as_teardown(setups=bash("make_db")),
        bash("drop_table").as_teardown(setups=bash("make_table")),
    ):
        bash("load")
    got = upstream(dag)
    assert got["make_table"] == {"make_db"}  # the inner setup after the outer one
    assert got["drop_db"] == {"make_db", "drop_table"}  # the inner teardown first
    assert got["load"] == {"make_table"}
    assert got["drop_table"] == {"make_table", "load"}


def test_a_task_made_before_the_block_joins_it_by_add_task():
    @task
    def made_before():
        pass

    with DAG("d") as dag:
        early = made_before()
        with bash("delete").as_teardown(setups=bash("create")) as scope:
            scope.add_task(early)
    assert upstream(dag)["made_before"] == {"create"}
    assert upstream(dag)["delete"] == {"create", "made_before"}


def test_only_a_setup_or_teardown_opens_a_block():
    with (
        DAG("d"),
        pytest.raises(DagDefinitionError, match="only a setup or teardown task"),
        bash("plain"),
    ):
        pass


def test_a_block_that_raises_links_nothing_and_closes():
    with DAG("d") as dag:
        with pytest.raises(RuntimeError), bash("delete").as_teardown(setups=bash("create")):
            bash("work")
            raise RuntimeError("the file's own error")
        assert dag.open_scopes == []
        bash("after")
    assert upstream(dag)["work"] == set() and upstream(dag)["after"] == set()


# ---------------------------------------------------------------- task groups


def test_a_group_stands_for_its_work_not_its_teardowns():
    """Airflow's documented example: ``tg >> w2`` skips the teardown t1 inside tg."""
    with DAG("d") as dag:
        with TaskGroup("tg") as tg:
            s1 = bash("s1")
            s1 >> bash("w1") >> bash("t1").as_teardown(setups=s1)
        tg >> bash("w2")
    assert upstream(dag)["w2"] == {"tg.w1"}


def test_nested_setups_around_a_group():
    """Airflow's nesting example: dag_s1 >> [tg, w2] >> dag_t1.as_teardown(setups=dag_s1)."""
    with DAG("d") as dag:
        with TaskGroup("tg") as tg:
            s1 = bash("s1")
            s1 >> bash("w1") >> bash("t1").as_teardown(setups=s1)
        w2 = bash("w2")
        tg >> w2
        dag_s1 = bash("dag_s1")
        dag_s1 >> [tg, w2] >> bash("dag_t1").as_teardown(setups=dag_s1)
    got = upstream(dag)
    assert got["tg.s1"] == {"dag_s1"}  # the group's root is its setup
    assert got["dag_t1"] == {"dag_s1", "tg.w1", "w2"}  # t1 runs beside dag_t1


def test_a_group_of_teardowns_stands_for_what_they_wait_on():
    with DAG("d") as dag:
        create = bash("create").as_setup()
        work = create >> bash("work")
        with TaskGroup("cleanup") as cleanup:
            work >> bash("drop").as_teardown(setups=create)
            bash("drop2").as_teardown(setups=create)
        cleanup >> bash("after")
    assert upstream(dag)["after"] == set(), "nothing in the group but clean-up"
    assert dag.tasks["after"].upstream_ids == []


# ---------------------------------------------------------------- rules and options


@pytest.mark.parametrize(
    ("given", "recorded"),
    [
        ("one_done", "one_done"),
        ("all_done_min_one_success", "all_done_min_one_success"),
        ("all_done_setup_success", "all_done_setup_success"),
        ("none_failed_or_skipped", "none_failed_min_one_success"),
        ("dummy", "always"),
        (TriggerRule.ONE_DONE, "one_done"),
    ],
)
def test_new_rules_and_airflows_old_names_are_accepted(given, recorded):
    with DAG("d", default_args={"trigger_rule": given}) as dag:
        made = bash("by_default")
        given_here = bash("given", trigger_rule=given)
        set_later = bash("set_later")
        set_later.trigger_rule = given
    assert made.trigger_rule == given_here.trigger_rule == set_later.trigger_rule == recorded
    assert dag.tasks["given"].options["trigger_rule"] == recorded


def test_a_short_circuits_reach_is_an_option_of_short_circuits_only():
    @task.short_circuit(ignore_downstream_trigger_rules=False)
    def gate():
        return False

    @task.short_circuit
    def gate_all():
        return False

    with DAG("d") as dag:
        gate()
        gate_all()
    assert dag.tasks["gate"].ignore_downstream_trigger_rules is False
    assert dag.tasks["gate_all"].ignore_downstream_trigger_rules is True


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: task.short_circuit(ignore_downstream_trigger_rules="no", task_id="t")(noop)(),
            "ignore_downstream_trigger_rules must be True or False, not 'no'",
        ),
        (
            lambda: task(ignore_downstream_trigger_rules=False)(noop)(),
            "ignore_downstream_trigger_rules is an option of short-circuit tasks",
        ),
        (
            lambda: PythonTask("t", noop, ignore_downstream_trigger_rules=False),
            "ignore_downstream_trigger_rules is an option of short-circuit tasks",
        ),
    ],
)
def test_a_bad_reach_is_an_error(make, message):
    with DAG("d"), pytest.raises(DagDefinitionError, match=message):
        make()


# ---------------------------------------------------------------- what the parser records

SCOPED = """
from dagrun import DAG, BashTask, task, setup, teardown

@setup
def create():
    return "c"

@teardown(on_failure_fail_dagrun=True)
def delete(cluster):
    pass

@task.short_circuit(ignore_downstream_trigger_rules=False)
def gate():
    return True

with DAG("scoped"):
    cluster = create()
    gate() >> BashTask("work", command="echo", trigger_rule="{rule}") >> delete(cluster)
    cluster >> gate
"""


def load(dags_dir, source: str) -> tuple[list[DagSpec], object]:
    path = write_dag(dags_dir, "scoped.py", source)
    return loader.load_file(str(path))


def test_the_spec_records_setups_teardowns_and_the_reach(dags_dir):
    [spec], error = load(dags_dir, SCOPED.format(rule="one_done"))
    assert error is None
    tasks = spec.task_map
    assert tasks["create"].is_setup and not tasks["create"].is_teardown
    assert tasks["delete"].is_teardown and tasks["delete"].on_failure_fail_dagrun
    assert tasks["delete"].trigger_rule == "all_done_setup_success"
    assert tasks["gate"].ignore_downstream_trigger_rules is False
    assert tasks["work"].ignore_downstream_trigger_rules is True
    assert not tasks["work"].is_setup and not tasks["work"].on_failure_fail_dagrun
    assert DagSpec.from_json(spec.to_json()) == spec


def test_a_spec_stored_before_setups_existed_still_loads(dags_dir):
    [spec], _ = load(dags_dir, SCOPED.format(rule="all_success"))
    data = json.loads(spec.to_json())
    for t in data["tasks"]:
        for key in ("is_setup", "is_teardown", "on_failure_fail_dagrun"):
            t.pop(key, None)  # a task stores only what differs from the defaults
        t.pop("ignore_downstream_trigger_rules", None)
    old = DagSpec.from_json(json.dumps(data))
    assert old.setup_ids == frozenset() and old.teardown_ids == frozenset()
    assert all(t.ignore_downstream_trigger_rules for t in old.tasks)


def test_a_task_right_after_a_setup_must_keep_all_success(dags_dir):
    source = SCOPED.replace(
        "cluster >> gate", "cluster >> BashTask('loose', command='echo', trigger_rule='all_done')"
    )
    specs, error = load(dags_dir, source.format(rule="all_success"))
    assert specs == [] and error is not None
    assert "task 'loose' comes right after setup task 'create', so its trigger rule must be" in str(
        error
    )

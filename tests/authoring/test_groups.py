"""Tests for dagrun.authoring.groups: ``TaskGroup`` and ``@task_group``, without a database."""

from __future__ import annotations

from pathlib import Path

import pytest

from dagrun import DAG, BashTask, TaskGroup, task, task_group
from dagrun.errors import DagDefinitionError
from dagrun.parsing import loader
from dagrun.parsing.spec import DagSpec, TaskSpec
from tests.helpers import bare_spec, write_dag


def bash(task_id: str) -> BashTask:
    return BashTask(task_id, command="echo")


def upstream(dag: DAG) -> dict[str, set[str]]:
    return {task_id: set(t.upstream_ids) for task_id, t in dag.tasks.items()}


# ---------------------------------------------------------------- ids and groups


def test_tasks_in_a_group_take_its_id_as_prefix():
    with DAG("d") as dag:
        bash("start")
        with TaskGroup("ingest") as group:
            bash("extract")
            bash("load")
    assert list(dag.tasks) == ["start", "ingest.extract", "ingest.load"]
    assert [t.group for t in dag.tasks.values()] == [None, "ingest", "ingest"]
    assert group.group_id == group.path == "ingest"
    assert group.tasks == [dag.tasks["ingest.extract"], dag.tasks["ingest.load"]]
    assert dag.groups == {"ingest": group}


def test_nested_groups_nest_their_prefixes():
    with DAG("d") as dag:
        with TaskGroup("outer") as outer:
            bash("a")
            with TaskGroup("inner") as inner:
                bash("t")
            bash("b")
        bash("after")
    assert list(dag.tasks) == ["outer.a", "outer.inner.t", "outer.b", "after"]
    assert dag.tasks["outer.inner.t"].group == "outer.inner"
    assert dag.tasks["outer.b"].group == "outer"
    assert dag.tasks["after"].group is None
    assert inner.group_id == "outer.inner"
    assert [t.task_id for t in outer.tasks] == ["outer.a", "outer.inner.t", "outer.b"]
    assert [t.task_id for t in inner.tasks] == ["outer.inner.t"]


def test_a_task_function_called_in_two_groups_gets_two_ids():
    @task
    def extract():
        return 1

    with DAG("d") as dag:
        with TaskGroup("a"):
            extract()
            extract()
        with TaskGroup("b"):
            extract()
    assert list(dag.tasks) == ["a.extract", "a.extract__1", "b.extract"]


def test_without_prefix_the_ids_stay_as_written_but_the_group_path_is_kept():
    with DAG("d") as dag, TaskGroup("outer"), TaskGroup("inner", prefix_group_id=False):
        bash("t")
    assert list(dag.tasks) == ["t"]
    assert dag.tasks["t"].group == "outer.inner"
    assert set(dag.groups) == {"outer", "outer.inner"}


def test_a_task_created_for_another_dag_does_not_join_the_open_group():
    other = DAG("other")
    with DAG("d") as dag, TaskGroup("g"):
        BashTask("t", command="echo", dag=other)
        bash("u")
    assert list(other.tasks) == ["t"]
    assert other.tasks["t"].group is None
    assert list(dag.tasks) == ["g.u"]


# ---------------------------------------------------------------- @task_group


def test_task_group_decorator_names_the_group_after_the_function():
    @task
    def extract():
        return 1

    @task
    def load(rows):
        return rows

    @task_group
    def ingest():
        load(extract())

    with DAG("d") as dag:
        first = ingest()
        second = ingest()
        first >> second
    assert list(dag.tasks) == [
        "ingest.extract",
        "ingest.load",
        "ingest__1.extract",
        "ingest__1.load",
    ]
    assert isinstance(first, TaskGroup)
    assert (first.group_id, second.group_id) == ("ingest", "ingest__1")
    assert upstream(dag)["ingest__1.extract"] == {"ingest.load"}


def test_task_group_decorator_takes_a_group_id_and_nests():
    @task_group(group_id="clean")
    def cleaning():
        bash("dedupe")

    @task_group
    def pipeline():
        bash("extract")
        cleaning()

    with DAG("d") as dag:
        pipeline()
    assert list(dag.tasks) == ["pipeline.extract", "pipeline.clean.dedupe"]
    assert dag.tasks["pipeline.clean.dedupe"].group == "pipeline.clean"


def test_task_group_decorator_returns_what_the_function_returns_if_anything():
    @task
    def total():
        return 3

    @task
    def report(n):
        return n

    @task_group
    def summarise():
        return total()

    with DAG("d") as dag:
        report(summarise())
    assert upstream(dag)["report"] == {"summarise.total"}
    assert dag.tasks["report"].data_inputs == ["summarise.total"]


# ---------------------------------------------------------------- dependencies


def diamond_group(name: str) -> TaskGroup:
    """A group with two roots and two leaves: a >> c, b >> c, c >> d, c >> e."""
    with TaskGroup(name) as group:
        a, b, c, d, e = (bash(x) for x in "abcde")
        [a, b] >> c >> [d, e]
    return group


def test_group_downstream_of_a_task_waits_through_its_roots():
    with DAG("d") as dag:
        start = bash("start")
        group = diamond_group("g")
        assert start >> group is group
    ups = upstream(dag)
    assert ups["g.a"] == ups["g.b"] == {"start"}
    assert ups["g.c"] == {"g.a", "g.b"}
    assert ups["g.d"] == ups["g.e"] == {"g.c"}


def test_a_task_downstream_of_a_group_waits_for_its_leaves():
    with DAG("d") as dag:
        group = diamond_group("g")
        end = bash("end")
        group >> end
    assert upstream(dag)["end"] == {"g.d", "g.e"}


def test_left_shift_and_lists_mix_groups_and_tasks():
    with DAG("d") as dag:
        group = diamond_group("g")
        solo = bash("solo")
        end = bash("end")
        start = bash("start")
        [group, solo] >> end
        group << start
    ups = upstream(dag)
    assert ups["end"] == {"g.d", "g.e", "solo"}
    assert ups["g.a"] == ups["g.b"] == {"start"}


def test_group_to_group_links_leaves_to_roots():
    with DAG("d") as dag:
        first = diamond_group("first")
        second = diamond_group("second")
        first >> second
    ups = upstream(dag)
    assert ups["second.a"] == ups["second.b"] == {"first.d", "first.e"}
    assert ups["second.c"] == {"second.a", "second.b"}


def test_a_nested_group_counts_in_its_parents_edges():
    with DAG("d") as dag:
        with TaskGroup("outer") as outer:
            first = bash("first")
            with TaskGroup("inner") as inner:
                bash("x")
            first >> inner
        outer >> bash("end")
        bash("start") >> outer
    ups = upstream(dag)
    assert ups["end"] == {"outer.inner.x"}
    assert ups["outer.first"] == {"start"}


def test_a_group_works_with_task_outputs_and_functions():
    @task
    def extract():
        return 1

    with DAG("d") as dag:
        output = extract()
        group = diamond_group("g")
        output >> group
        group >> extract
    ups = upstream(dag)
    assert ups["g.a"] == {"extract"}
    assert ups["extract"] == {"g.d", "g.e"}


# ---------------------------------------------------------------- bad input


def test_a_group_id_that_is_a_task_id_is_refused_either_way():
    with DAG("first"), pytest.raises(DagDefinitionError) as raised:
        bash("ingest")
        TaskGroup("ingest")
    assert str(raised.value) == "DAG 'first': task group id 'ingest' is also a task's id"
    assert raised.value.dag_id == "first"

    with DAG("second"), pytest.raises(DagDefinitionError) as raised:
        TaskGroup("ingest")
        bash("ingest")
    assert str(raised.value) == "DAG 'second': task id 'ingest' is also a task group's id"


def test_the_same_group_id_twice_is_refused():
    with DAG("d"), pytest.raises(DagDefinitionError, match="another task group's id"):
        TaskGroup("g")
        TaskGroup("g")


@pytest.mark.parametrize("bad", ["", "a.b", "a b", "x\n", "é", "a" * 201, 7, None])
def test_an_invalid_group_id_is_refused(bad):
    with DAG("d"), pytest.raises(DagDefinitionError, match="task group id") as raised:
        TaskGroup(bad)
    assert "\n" not in str(raised.value)


def test_a_group_outside_a_dag_is_refused():
    with pytest.raises(DagDefinitionError, match="'g' created outside a DAG"):
        TaskGroup("g")

    @task_group
    def ingest():
        bash("t")

    with pytest.raises(DagDefinitionError, match="'ingest' called outside a DAG"):
        ingest()


def test_an_empty_group_in_a_dependency_is_refused():
    with DAG("d"), pytest.raises(DagDefinitionError, match="'g' has no tasks"):
        group = TaskGroup("g")
        bash("t") >> group


def test_a_group_clash_in_a_file_is_an_import_error(dags_dir: Path):
    path = write_dag(
        dags_dir,
        "clash.py",
        """
        from dagrun import DAG, BashTask, TaskGroup

        with DAG("clash"):
            BashTask("ingest", command="echo")
            with TaskGroup("ingest"):
                BashTask("extract", command="echo")
        """,
    )
    specs, error = loader.load_file(str(path))
    assert specs == []
    assert error.line == 5
    assert "task group id 'ingest' is also a task's id" in error.reason


# ---------------------------------------------------------------- the spec


def test_the_spec_keeps_each_tasks_group_through_json(dags_dir: Path):
    path = write_dag(
        dags_dir,
        "grouped.py",
        """
        from dagrun import DAG, BashTask, TaskGroup

        with DAG("grouped"):
            start = BashTask("start", command="echo")
            with TaskGroup("outer") as outer:
                with TaskGroup("inner"):
                    BashTask("t", command="echo")
            start >> outer
        """,
    )
    specs, error = loader.load_file(str(path))
    assert error is None
    spec = specs[0]
    assert [(t.task_id, t.group) for t in spec.tasks] == [
        ("start", None),
        ("outer.inner.t", "outer.inner"),
    ]
    again = DagSpec.from_json(spec.to_json())
    assert again == spec
    assert again.task_map["outer.inner.t"].group == "outer.inner"


def test_a_spec_stored_before_groups_reads_as_ungrouped():
    spec = bare_spec(TaskSpec(task_id="t", kind="bash", upstream=()), dag_id="old")
    stored = spec.to_json().replace('"group": null, ', "")
    assert '"group"' not in stored
    assert DagSpec.from_json(stored).tasks[0].group is None

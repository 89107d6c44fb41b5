"""Tests for dagrun.parsing.scopes: which setups a task needs, and what clearing it clears,
on the graphs Airflow's "Setup and Teardown" guide explains them with."""

from __future__ import annotations

import pytest

from dagrun.parsing.scopes import SetupScope, with_setups_and_teardowns
from dagrun.parsing.spec import DagSpec, TaskSpec
from tests.helpers import bare_spec

WORK, SETUP, TEARDOWN = "work", "setup", "teardown"


def spec_of(*tasks: tuple[str, str, tuple[str, ...]]) -> DagSpec:
    """(task id, role, upstream ids) each, in topological order."""
    return bare_spec(
        *(
            TaskSpec(
                task_id=task_id,
                kind="bash",
                upstream=upstream,
                trigger_rule="all_done_setup_success" if role == TEARDOWN else "all_success",
                is_setup=role == SETUP,
                is_teardown=role == TEARDOWN,
            )
            for task_id, role, upstream in tasks
        )
    )


#: s1 >> w1 >> w2 >> t1.as_teardown(setups=s1) >> w3; w2 >> w4
SCOPE = spec_of(
    ("s1", SETUP, ()),
    ("w1", WORK, ("s1",)),
    ("w2", WORK, ("w1",)),
    ("t1", TEARDOWN, ("w2", "s1")),
    ("w3", WORK, ("t1",)),
    ("w4", WORK, ("w2",)),
)


@pytest.mark.parametrize(
    ("cleared", "expected"),
    [
        ({"w1"}, {"w1", "s1", "t1"}),  # between s1 and t1: needs s1
        ({"w2"}, {"w2", "s1", "t1"}),
        ({"w3"}, {"w3"}),  # after the teardown
        ({"w4"}, {"w4"}),  # beside it: t1 is not downstream of w4
        ({"s1"}, {"s1", "t1"}),  # a setup brings its teardowns
        ({"t1"}, {"t1"}),  # a teardown alone brings nothing
        ({"w3", "w1"}, {"w3", "w1", "s1", "t1"}),
        ({"gone"}, {"gone"}),  # a task an old run had, since removed
    ],
)
def test_clearing_brings_the_setups_in_scope_and_their_teardowns(cleared, expected):
    assert with_setups_and_teardowns(SCOPE, cleared) == expected


def test_relevant_setups_and_what_readiness_reads():
    assert SCOPE.relevant_setups == {"w1": ("s1",), "w2": ("s1",)}
    assert SCOPE.setup_scopes == {
        "w2": SetupScope(direct=(), indirect=("s1",)),
        "t1": SetupScope(direct=("s1",), indirect=()),
    }
    assert SCOPE.setup_dependants == {"s1": ("w2",)}
    assert SCOPE.quiet_teardowns == {"t1"}


def test_a_setup_without_a_teardown_scopes_everything_below_it():
    """create >> run_query >> other_task: clearing other_task clears create."""
    spec = spec_of(
        ("create", SETUP, ()),
        ("run_query", WORK, ("create",)),
        ("other_task", WORK, ("run_query",)),
    )
    assert with_setups_and_teardowns(spec, {"other_task"}) == {"other_task", "create"}


def test_a_teardown_ends_the_scope():
    """Adding run_query >> delete.as_teardown(setups=create): other_task is out of scope."""
    spec = spec_of(
        ("create", SETUP, ()),
        ("run_query", WORK, ("create",)),
        ("other_task", WORK, ("run_query",)),
        ("delete", TEARDOWN, ("run_query", "create")),
    )
    assert with_setups_and_teardowns(spec, {"other_task"}) == {"other_task"}
    assert with_setups_and_teardowns(spec, {"run_query"}) == {"run_query", "create", "delete"}


def test_nested_scopes():
    """dag_s1 >> [s1 >> w1 >> t1(s1)], w2 >> dag_t1(dag_s1): clearing w2 brings dag_s1 and
    dag_t1 and nothing of the inner pair; clearing w1 brings both pairs."""
    spec = spec_of(
        ("dag_s1", SETUP, ()),
        ("s1", SETUP, ("dag_s1",)),
        ("w1", WORK, ("s1",)),
        ("t1", TEARDOWN, ("w1", "s1")),
        ("w2", WORK, ("w1", "dag_s1")),
        ("dag_t1", TEARDOWN, ("w1", "w2", "dag_s1")),
    )
    assert with_setups_and_teardowns(spec, {"w2"}) == {"w2", "dag_s1", "dag_t1"}
    assert with_setups_and_teardowns(spec, {"w1"}) == {"w1", "s1", "t1", "dag_s1", "dag_t1"}
    assert spec.relevant_setups["s1"] == ("dag_s1",)  # a setup in another's scope
    assert spec.setup_scopes["w1"] == SetupScope(direct=(), indirect=("dag_s1",))


def test_parallel_setups_each_with_its_teardown():
    """[create_cluster, create_bucket] >> run_query >> [delete_cluster, delete_bucket]."""
    spec = spec_of(
        ("create_cluster", SETUP, ()),
        ("create_bucket", SETUP, ()),
        ("run_query", WORK, ("create_cluster", "create_bucket")),
        ("delete_cluster", TEARDOWN, ("run_query", "create_cluster")),
        ("delete_bucket", TEARDOWN, ("run_query", "create_bucket")),
    )
    assert with_setups_and_teardowns(spec, {"run_query"}) == set(spec.task_map)
    assert with_setups_and_teardowns(spec, {"create_bucket"}) == {
        "create_bucket",
        "delete_bucket",
    }

"""Clearing follows external task markers (``dagrun.runtime.markers``): into the marked DAG's
runs at the rendered date, downstream of the marked task, marker after marker within the
first marker's recursion depth; on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest

from dagrun.errors import UsageError
from dagrun.runtime import markers
from dagrun.store import Store, dag_reads
from tests.helpers import run_once, write_dag

MARKED = """
from dagrun import DAG, BashTask
from dagrun.sensors import ExternalTaskMarker

with DAG("parent", schedule="@daily", start_date="2026-01-01", timezone="Asia/Dhaka"):
    BashTask("first", command="true") >> ExternalTaskMarker(
        "mark", external_dag_id="child", external_task_id="wait", logical_date="{{ ds }}"
    )
    ExternalTaskMarker(
        "deep", external_dag_id="child", external_task_id="onward", recursion_depth=1
    )
    ExternalTaskMarker("lost", external_dag_id="nowhere", external_task_id="x")
    ExternalTaskMarker("no_task", external_dag_id="child", external_task_id="absent")

with DAG("by_param", schedule="@daily", start_date="2026-01-01", timezone="Asia/Dhaka",
         params={"day": "2025-01-01"}):
    ExternalTaskMarker(
        "mark", external_dag_id="child", external_task_id="wait", logical_date="{{ params.day }}"
    )

with DAG("child", schedule="@daily", start_date="2026-01-01", timezone="Asia/Dhaka"):
    BashTask("wait", command="true") >> BashTask("after", command="true")
    BashTask("other", command="true")
    BashTask("onward", command="true") >> ExternalTaskMarker(
        "back", external_dag_id="parent", external_task_id="first"
    )
"""


@pytest.fixture
def ran(store: Store, dags_dir: Path) -> dict[str, int]:
    """Each DAG runs once, at the same logical date: their run pks."""
    write_dag(dags_dir, "marked.py", MARKED)
    found = {}
    conf = {"by_param": {"day": "2026-01-01"}}
    for dag_id in ("parent", "child", "by_param"):
        run, tasks = run_once(store, dags_dir, dag_id, run_id=dag_id, conf=conf.get(dag_id))
        assert run.state == "success", {t: r.last_error for t, r in tasks.items()}
        found[dag_id] = run.id
    return found


def follow(store: Store, dag_id: str, selection, failed_only: bool = False):
    with store.read() as conn:
        spec = dag_reads.load_spec(conn, dag_id)
        found = markers.follow(conn, spec, selection, failed_only=failed_only)
    return {f.spec.dag_id: (f.selection, f.count) for f in found}


@pytest.mark.slow
def test_a_marker_clears_the_marked_task_and_its_downstream(store: Store, ran):
    parent, child = ran["parent"], ran["child"]
    assert follow(store, "parent", {parent: {"first", "mark"}}) == {
        "child": ({child: {"wait", "after"}}, 2)
    }, "'{{ ds }}' has no offset: the child DAG's local midnight, its logical date"
    assert follow(store, "parent", {parent: {"mark"}}, failed_only=True) == {}
    assert follow(store, "parent", {parent: {"first"}}) == {}, "no marker chosen"
    assert follow(store, "parent", {parent: {"no_task"}}) == {}, "nothing there to clear"
    back = follow(store, "child", {child: {"onward", "back"}})
    assert back == {
        "parent": ({parent: {"first", "mark"}}, 2),
        "child": ({child: {"wait", "after"}}, 2),
    }, "followed back into the child itself, without what was already chosen"


@pytest.mark.slow
def test_markers_fail_clearly_past_their_depth_or_to_an_unknown_dag(store: Store, ran):
    parent = ran["parent"]
    with pytest.raises(UsageError, match="at most 1 DAGs deep: marker 'back' of DAG 'child'"):
        follow(store, "parent", {parent: {"deep"}})
    with pytest.raises(UsageError, match="names DAG 'nowhere', which is not known"):
        follow(store, "parent", {parent: {"lost"}})


@pytest.mark.slow
def test_a_marker_renders_with_its_runs_params_as_its_task_did(store: Store, ran):
    assert follow(store, "by_param", {ran["by_param"]: {"mark"}}) == {
        "child": ({ran["child"]: {"wait", "after"}}, 2)
    }, "the run's conf overrides the param's default day, on which the child has no run"

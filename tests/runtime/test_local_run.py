"""A test run in this process through a private store (``runtime.local_run``): the part of a
DAG that ``tasks test`` runs, the pools copied from the real store, retries as the DAG says,
and nothing written to the real store, on SQLite and PostgreSQL as that store."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from dagrun.errors import LocalRunStuck
from dagrun.parsing.spec import TaskSpec
from dagrun.runtime.dag_sync import sync_dags
from dagrun.runtime.local_run import needed_for, run_locally
from dagrun.store import dag_reads, pools, run_reads
from dagrun.timing.timetable import DataInterval
from tests.helpers import bare_spec, write_dag

WHEN = datetime(2026, 1, 5, tzinfo=UTC)


def task(task_id: str, *upstream: str, **options) -> TaskSpec:
    return TaskSpec(task_id, "python", tuple(upstream), **options)


def test_a_task_needs_its_upstream_and_the_teardowns_of_its_setups():
    """``make`` (a setup) >> ``work`` >> ``other`` >> ``drop`` (its teardown, after both);
    ``a`` >> ``work``; ``b`` beside. ``work`` needs ``a`` and ``make``, and ``drop`` so what
    ``make`` made is removed; ``drop`` waits for what runs, not for ``other``."""
    spec = bare_spec(
        task("make", is_setup=True),
        task("a"),
        task("b"),
        task("work", "make", "a"),
        task("other", "work"),
        task("drop", "make", "work", "other", is_teardown=True),
        dag_id="scoped",
    )
    part = needed_for(spec, "work")
    assert [(t.task_id, t.upstream) for t in part.tasks] == [
        ("make", ()),
        ("a", ()),
        ("work", ("make", "a")),
        ("drop", ("make", "work")),
    ]
    assert [t.task_id for t in needed_for(spec, "b").tasks] == ["b"]


POOLED = """
from dagrun import DAG, task

with DAG("pooled", schedule=None):
    @task(pool="db")
    def load():
        return "loaded"

    @task(retries=1, retry_delay=0)
    def shaky(try_number):
        if try_number == 1:
            raise ConnectionError("blip")
        return try_number

    load() >> shaky()
"""


def local_run(store, dags_dir: Path):
    """Run ``pooled`` through a private store copied from ``store``; (its end, the attempts
    heard of as (task, outcome))."""
    write_dag(dags_dir, "pooled.py", POOLED)
    sync_dags(store, str(dags_dir))
    with store.read() as conn:
        spec = dag_reads.get_dag(conn, "pooled").spec
    heard: list[tuple[str, str]] = []
    done = run_locally(
        store,
        spec,
        DataInterval(WHEN, WHEN),
        {},
        lambda task_id, index: None,
        lambda task_id, index, result: heard.append((task_id, result.outcome.value)),
    )
    return done, heard


def set_pool(store, slots: int) -> None:
    with store.write() as conn:
        pools.set_pool(conn, "db", slots, None)


def test_a_task_of_a_pool_runs_and_a_failed_try_is_retried_as_in_a_run(store, dags_dir):
    set_pool(store, 1)
    done, heard = local_run(store, dags_dir)
    assert done.state == "success"
    assert [(t.task_id, t.state, t.try_number) for t in done.tasks] == [
        ("load", "success", 1),
        ("shaky", "success", 2),
    ]
    assert heard == [("load", "success"), ("shaky", "failed"), ("shaky", "success")]
    with store.read() as conn:
        assert run_reads.runs(conn, "pooled") == [], "nothing reaches the real store"


@pytest.mark.parametrize("slots", [0, None], ids=["no-slot", "no-pool"])
def test_a_task_whose_pool_cannot_run_it_ends_the_test_with_the_reason(store, dags_dir, slots):
    if slots is not None:
        set_pool(store, slots)
    with pytest.raises(LocalRunStuck, match=r"\(load\) wait for pool 'db'.*dagrun pools set"):
        local_run(store, dags_dir)

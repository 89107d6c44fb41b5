"""A run's driver (dagrun.driver): the worker it embeds has no more children than the runs
could ever keep busy, and they start with the DAG's file imported."""

from __future__ import annotations

from dagrun import DAG, BashTask, task
from dagrun.driver import RunDriver
from dagrun.loader import build_spec
from dagrun.worker import WorkerOptions


def spec_of(tasks: int, mapped: bool = False):
    with DAG("sized", schedule="@daily", start_date="2026-01-01") as dag:
        for i in range(tasks):
            BashTask(f"t{i}", command="echo")
        if mapped:

            @task
            def each(x):
                return x

            each.expand(x=[1, 2, 3])
    return build_spec(dag, "/dags/sized.py")


def children_of(store, spec, runs: int, cores: int) -> WorkerOptions:
    driver = RunDriver(store, spec, list(range(1, runs + 1)), workers=cores)
    return driver.options


def test_a_one_task_run_gets_one_child_and_it_imports_the_file_first(sqlite_store):
    options = children_of(sqlite_store, spec_of(1), runs=1, cores=8)
    assert options.concurrency == 1
    assert options.preload == ("/dags/sized.py",)


def test_children_are_capped_by_the_task_instances_of_all_the_runs(sqlite_store):
    assert children_of(sqlite_store, spec_of(3), runs=1, cores=8).concurrency == 3
    assert children_of(sqlite_store, spec_of(3), runs=2, cores=4).concurrency == 4


def test_a_mapped_task_keeps_every_child(sqlite_store):
    """Its indexes are unknown until it expands: no cap."""
    assert children_of(sqlite_store, spec_of(1, mapped=True), runs=1, cores=6).concurrency == 6

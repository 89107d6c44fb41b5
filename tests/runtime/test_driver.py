"""A run's driver (dagrun.runtime.driver): the worker it embeds has no more children than the runs
could ever keep busy, and they start with the DAG's file imported."""

from __future__ import annotations

from dagrun import DAG, BashTask, task
from dagrun.parsing.loader import build_spec
from dagrun.runtime.driver import RunDriver
from dagrun.runtime.worker import WorkerOptions


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


def driver_of_one_run(store, tmp_path):
    """A driver of one registered daily run of a one-task DAG, whose worker ``run`` the
    test replaces (no child runs anything)."""
    from dagrun.states import RunType
    from dagrun.store import registry, runs
    from tests.store.test_store import days

    spec = spec_of(1)
    with store.write() as conn:
        now = store.now(conn)
        registry.save_file(conn, spec.fileloc, "hash", [spec], None, None, now)
        runs.create_runs(conn, spec, days(1), RunType.BACKFILL, now)
        (pk,) = conn.exec_driver_sql("SELECT id FROM dag_run").scalars().all()
    options = WorkerOptions(log_dir=tmp_path / "logs", poll_interval=0.05)
    return RunDriver(store, spec, [pk], worker_options=options, watch_interval=0.01), pk


def end_in_store(store, run_pk: int) -> None:
    with store.write() as conn:
        conn.exec_driver_sql(f"UPDATE task_instance SET state = 'success' WHERE run_pk = {run_pk}")
        conn.exec_driver_sql(f"UPDATE dag_run SET state = 'success' WHERE id = {run_pk}")


def test_a_run_that_ended_is_reported_done_whatever_a_stale_look_said(sqlite_store, tmp_path):
    """The watcher's look can read just before the worker's last commit lands and say
    "not finished" after the commit hook said "finished": what the command reports is
    read from the store once the worker stopped."""
    from dagrun.runtime.worker import WorkerStats

    driver, pk = driver_of_one_run(sqlite_store, tmp_path)

    def worker_run():
        end_in_store(sqlite_store, pk)
        driver._finished = False  # the stale look, last to write
        return WorkerStats()

    driver.worker.run = worker_run
    assert not driver.run().interrupted


def test_a_stop_decided_in_a_commit_that_did_not_land_is_reported_interrupted(
    sqlite_store, tmp_path
):
    from dagrun.runtime.worker import WorkerStats

    driver, _pk = driver_of_one_run(sqlite_store, tmp_path)

    def worker_run():
        driver._finished = True  # decided inside a transaction that then failed
        return WorkerStats()

    driver.worker.run = worker_run
    assert driver.run().interrupted

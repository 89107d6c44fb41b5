"""Setup and teardown tasks, the new trigger rules and the short-circuit's reach, end to end
in-process (attempts in real child processes) on SQLite and PostgreSQL: the teardown runs
after failed work, how the run ends, and clearing work that runs its setup and teardown
again."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from dagrun.runtime.driver import RunDriver
from dagrun.runtime.worker import WorkerOptions
from dagrun.store import dag_reads, operator_actions, runs
from dagrun.store.schema import task_attempt, task_instance
from tests.helpers import run_once, write_dag

pytestmark = pytest.mark.timeout(120)

CLUSTER = """
from pathlib import Path

from dagrun import DAG, setup, task, teardown


def note(what):
    with open({log!r}, "a") as out:
        out.write(what + "\\n")


@setup
def create():
    note("create")
    return "cluster-1"


@task
def query(cluster):
    note("query on " + cluster)
    if not Path({fixed!r}).exists():
        raise ValueError("the query broke")


@task
def report():
    note("report")


@teardown(on_failure_fail_dagrun={fail_run})
def delete(cluster):
    note("delete " + cluster)
    if {teardown_fails}:
        raise RuntimeError("delete broke")


with DAG("cluster", schedule=None):
    cluster = create()
    query(cluster) >> report() >> delete(cluster)
"""


def cluster_dag(dags_dir: Path, tmp_path: Path, **given) -> Path:
    """The DAG above; its log of what ran is returned. ``fixed``: the query succeeds."""
    log, fixed = tmp_path / "ran.log", tmp_path / "fixed"
    if given.pop("fixed", False):
        fixed.touch()
    options = {"fail_run": False, "teardown_fails": False, **given}
    write_dag(dags_dir, "cluster.py", CLUSTER.format(log=str(log), fixed=str(fixed), **options))
    return log


def states(store) -> dict[str, tuple[str, int]]:
    """task_id -> (state, try number)."""
    with store.read() as conn:
        rows = conn.execute(
            select(task_instance.c.task_id, task_instance.c.state, task_instance.c.try_number)
        ).all()
    return {task_id: (state, tries) for task_id, state, tries in rows}


def test_the_teardown_runs_after_failed_work_and_the_run_fails_for_the_work(
    store, dags_dir, tmp_path
):
    log = cluster_dag(dags_dir, tmp_path)
    run, _ = run_once(store, dags_dir, "cluster")
    assert run.state == "failed"
    assert states(store) == {
        "create": ("success", 1),
        "query": ("failed", 1),
        "report": ("upstream_failed", 0),
        "delete": ("success", 1),
    }
    assert log.read_text().splitlines() == ["create", "query on cluster-1", "delete cluster-1"]


@pytest.mark.parametrize(("fail_run", "run_state"), [(False, "success"), (True, "failed")])
def test_a_failed_teardown_fails_the_run_only_when_it_says_so(
    store, dags_dir, tmp_path, fail_run, run_state
):
    cluster_dag(dags_dir, tmp_path, fixed=True, teardown_fails=True, fail_run=fail_run)
    run, _ = run_once(store, dags_dir, "cluster")
    assert states(store)["delete"] == ("failed", 1)
    assert states(store)["report"] == ("success", 1)
    assert run.state == run_state


def test_a_failed_setup_leaves_nothing_to_run_or_tear_down(store, dags_dir, tmp_path):
    write_dag(
        dags_dir,
        "broken.py",
        """
        from dagrun import DAG, BashTask

        with DAG("broken", schedule=None):
            make = BashTask("make", command="exit 3").as_setup()
            use = BashTask("use", command="echo use")
            after = BashTask("after", command="echo after", trigger_rule="all_done")
            make >> use >> after >> BashTask("drop", command="echo drop").as_teardown(setups=make)
        """,
    )
    run, _ = run_once(store, dags_dir, "broken")
    assert run.state == "failed"
    assert {t: s for t, (s, _) in states(store).items()} == {
        "make": "failed",
        "use": "upstream_failed",
        "after": "upstream_failed",  # all_done, but in make's scope: make must succeed
        "drop": "upstream_failed",  # no setup succeeded: nothing to tear down
    }


def rerun(store, spec, run_pk: int, tmp_path: Path) -> None:
    options = WorkerOptions(concurrency=2, log_dir=tmp_path / "logs")
    RunDriver(store, spec, [run_pk], worker_options=options).run()


def test_clearing_failed_work_runs_its_setup_and_teardown_again(store, dags_dir, tmp_path):
    log = cluster_dag(dags_dir, tmp_path)
    run, _ = run_once(store, dags_dir, "cluster")
    assert run.state == "failed"
    (tmp_path / "fixed").touch()
    log.unlink()
    with store.write() as conn:
        spec = dag_reads.get_dag(conn, "cluster").spec
        cleared = operator_actions.clear_runs(conn, spec, {run.id: {"query"}}, store.now(conn))
    assert cleared == (1, 3), "query, and with it create and delete"
    rerun(store, spec, run.id, tmp_path)
    assert states(store) == {
        "create": ("success", 2),
        "query": ("success", 2),
        "report": ("upstream_failed", 0),  # not cleared: it keeps its state
        "delete": ("success", 2),
    }
    # delete waits for create and for report, which was not cleared: it may run beside query
    first, *rest = log.read_text().splitlines()
    assert first == "create" and sorted(rest) == ["delete cluster-1", "query on cluster-1"]


def test_cleared_work_further_down_waits_for_its_setup_again(store, dags_dir, tmp_path):
    """report is not directly after create: cleared with it, it still waits for it (and
    the end of create alone must make it ready)."""
    log = cluster_dag(dags_dir, tmp_path, fixed=True)
    run, _ = run_once(store, dags_dir, "cluster")
    assert run.state == "success"
    log.unlink()
    with store.write() as conn:
        spec = dag_reads.get_dag(conn, "cluster").spec
        operator_actions.clear_runs(conn, spec, {run.id: {"report"}}, store.now(conn))
    with store.write() as conn:  # the finished run waits for a slot again: start it
        assert runs.admit_and_start(conn, spec, store.now(conn)) == [run.id]
    got = states(store)
    assert got["create"][0] == "queued"
    assert got["report"][0] == "none", "its direct upstream succeeded, its setup has not"
    assert got["query"] == ("success", 1)
    rerun(store, spec, run.id, tmp_path)
    assert {t: s for t, (s, _) in states(store).items()} == dict.fromkeys(spec.task_map, "success")
    assert log.read_text().splitlines() == ["create", "report", "delete cluster-1"]
    with store.read() as conn:
        ends = dict(
            conn.execute(
                select(task_attempt.c.task_id, task_attempt.c.ended_at).where(
                    task_attempt.c.try_number == 2
                )
            ).all()
        )
        started = conn.execute(
            select(task_attempt.c.started_at).where(
                task_attempt.c.task_id == "report", task_attempt.c.try_number == 2
            )
        ).scalar_one()
    assert started >= ends["create"]


REACH = """
from dagrun import DAG, task

with DAG("reach", schedule=None):
    @task.short_circuit(ignore_downstream_trigger_rules={reach})
    def gate():
        return []

    @task
    def direct():
        pass

    @task(trigger_rule="all_done")
    def cleanup():
        pass

    @task
    def after():
        pass

    @task(trigger_rule="one_done")
    def either(): ...

    gate() >> direct() >> cleanup() >> after() >> either()
"""


@pytest.mark.parametrize(
    ("reach", "expected"),
    [
        (True, dict.fromkeys(["direct", "cleanup", "after", "either"], "skipped")),
        (
            False,
            {"direct": "skipped", "cleanup": "success", "after": "success", "either": "success"},
        ),
    ],
    ids=["skips-all-below", "respects-rules-below-its-direct-downstream"],
)
def test_a_falsy_short_circuit_with_either_reach(store, dags_dir, reach, expected):
    write_dag(dags_dir, "reach.py", REACH.format(reach=reach))
    run, _ = run_once(store, dags_dir, "reach")
    assert run.state == "success"
    assert {t: s for t, (s, _) in states(store).items()} == {"gate": "success", **expected}

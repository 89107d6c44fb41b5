"""Pools: at most ``slots`` tasks of a pool run at once, on every engine and every worker."""

from __future__ import annotations

import json
from itertools import pairwise

import pytest
from sqlalchemy import select

from dagrun.states import AttemptOutcome
from dagrun.store import attempts, dag_reads, pools, registry
from dagrun.store.attempts import Outcome
from dagrun.store.schema import task_attempt
from tests.helpers import most_at_once, queue_run, run_cli, run_once, write_dag

POOLED = """
import time
from dagrun import DAG, task

with DAG("pooled", schedule=None):
    @task(pool="db")
    def load():
        time.sleep({seconds})

    @task
    def free():
        return 1

    for _ in range(3):
        load()
    for _ in range(2):
        free()
"""


def claim(store, limit=10):
    with store.write() as conn:
        return attempts.claim(conn, "w", limit, 30, store.now(conn))


def finish(store, claims):
    specs = registry.SpecCache()
    outcomes = [
        Outcome(c.ti_id, c.run_pk, c.dag_id, c.task_id, c.fence_token, AttemptOutcome.SUCCESS)
        for c in claims
    ]
    with store.write() as conn:
        attempts.complete(conn, "w", outcomes, specs.bound(conn), store.now(conn))


def test_a_full_pool_holds_its_tasks_back(store, dags_dir):
    write_dag(dags_dir, "pooled.py", POOLED.format(seconds=0))
    with store.write() as conn:
        pools.set_pool(conn, "db", 1, "the warehouse")
    queue_run(store, dags_dir, "pooled")
    first = claim(store)
    assert sorted(c.task_id for c in first) == ["free", "free__1", "load"]
    assert claim(store) == [], "the pool's only slot is taken"
    finish(store, [c for c in first if c.task_id == "load"])
    (second,) = claim(store)
    assert second.task_id.startswith("load")
    with store.read() as conn:
        (row,) = dag_reads.pool_rows(conn)
    assert (row.name, row.slots, row.running, row.queued) == ("db", 1, 1, 1)


def test_tasks_of_a_missing_pool_wait_until_it_exists(store, dags_dir):
    write_dag(dags_dir, "pooled.py", POOLED.format(seconds=0))
    queue_run(store, dags_dir, "pooled")
    assert sorted(c.task_id for c in claim(store)) == ["free", "free__1"]
    with store.read() as conn:
        assert pools.missing_pools(conn) == ["db"]
    with store.write() as conn:
        pools.set_pool(conn, "db", 2, None)
    assert len(claim(store)) == 2


def test_pooled_attempts_never_overlap_with_four_children(sqlite_store, dags_dir):
    write_dag(dags_dir, "pooled.py", POOLED.format(seconds=0.3))
    with sqlite_store.write() as conn:
        pools.set_pool(conn, "db", 1, None)
    run, _ = run_once(sqlite_store, dags_dir, "pooled", workers=4)
    assert run.state == "success"
    with sqlite_store.read() as conn:
        spans = conn.execute(
            select(task_attempt.c.started_at, task_attempt.c.ended_at)
            .where(task_attempt.c.task_id.like("load%"))
            .order_by(task_attempt.c.started_at)
        ).all()
    assert len(spans) == 3
    for before, after in pairwise(spans):
        assert after.started_at >= before.ended_at, "two tasks of a 1-slot pool overlapped"


@pytest.mark.slow
def test_pools_cli(cli_env):
    assert (
        run_cli("pools", "set", "db", "2", "--description", "warehouse", env=cli_env).returncode
        == 0
    )
    listed = run_cli("pools", "list", "--json", env=cli_env)
    assert json.loads(listed.stdout) == [
        {
            "name": "db",
            "slots": 2,
            "description": "warehouse",
            "running": 0,
            "queued": 0,
            "exists": True,
        }
    ]
    bad = run_cli("pools", "set", "../x", "2", env=cli_env)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert run_cli("pools", "delete", "db", env=cli_env).returncode == 0
    missing = run_cli("pools", "delete", "db", env=cli_env)
    assert missing.returncode == 2 and "no pool 'db'" in missing.stderr


CAPPED = """
import time
from dagrun import DAG, task

with DAG("capped", schedule=None, max_active_tasks=2):
    @task(pool={pool})
    def work():
        time.sleep({seconds})

    for _ in range(3):
        work()
"""


def test_max_active_tasks_caps_a_dag_across_its_runs(store, dags_dir):
    write_dag(dags_dir, "capped.py", CAPPED.format(pool=None, seconds=0))
    queue_run(store, dags_dir, "capped", "first")
    queue_run(store, dags_dir, "capped", "second")
    first = claim(store)
    assert len(first) == 2, "two of six queued task instances: the DAG's cap"
    assert claim(store) == []
    finish(store, first[:1])
    assert len(claim(store)) == 1
    with store.read() as conn:
        assert dag_reads.pool_rows(conn) == []


def test_a_capped_task_in_a_pool_waits_for_both(store, dags_dir):
    write_dag(dags_dir, "capped.py", CAPPED.format(pool='"db"', seconds=0))
    with store.write() as conn:
        pools.set_pool(conn, "db", 1, None)
    queue_run(store, dags_dir, "capped")
    first = claim(store)
    assert len(first) == 1, "the pool has one slot, the cap two: one"
    with store.write() as conn:
        pools.set_pool(conn, "db", 5, None)
    assert len(claim(store)) == 1, "now the cap of two holds"


def test_a_dag_that_drops_its_cap_is_no_longer_limited(store, dags_dir):
    write_dag(dags_dir, "capped.py", CAPPED.format(pool=None, seconds=0))
    queue_run(store, dags_dir, "capped")
    write_dag(
        dags_dir,
        "capped.py",
        CAPPED.format(pool=None, seconds=0).replace(", max_active_tasks=2", ""),
    )
    queue_run(store, dags_dir, "capped", "second")  # syncs the file: the cap row goes
    assert len(claim(store)) == 6


def test_capped_attempts_never_exceed_the_cap_with_four_children(sqlite_store, dags_dir):
    """Measured from the attempts' own recorded start and end times."""
    write_dag(dags_dir, "capped.py", CAPPED.format(pool=None, seconds=0.3))
    run, _ = run_once(sqlite_store, dags_dir, "capped", workers=4)
    assert run.state == "success"
    with sqlite_store.read() as conn:
        spans = conn.execute(select(task_attempt.c.started_at, task_attempt.c.ended_at)).all()
    assert len(spans) == 3
    assert most_at_once(spans) <= 2, "more than max_active_tasks=2 attempts ran at once"

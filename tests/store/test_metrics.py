"""The lag and stuck-work metrics (store.metrics) and their Prometheus text, on both engines."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import insert, update

from dagrun import DAG, BashTask
from dagrun.parsing.loader import build_spec
from dagrun.states import AttemptOutcome, CallbackState, RunType
from dagrun.store import metrics, pools, runs
from dagrun.store.schema import callback, dag_run
from dagrun.webapp.metrics import metrics_text
from tests.store.test_store import T0, claim, complete, days, make_spec, outcome, register, start


def read(store):
    with store.read() as conn:
        return metrics.metrics(conn, store.now(conn))


def spec_of(dag_id: str, **options):
    """a >> b, daily; a in ``pool`` if given."""
    pool = options.pop("pool", None)
    with DAG(dag_id, schedule="@daily", start_date="2026-01-01", **options) as dag:
        BashTask("a", command="echo", pool=pool) >> BashTask("b", command="echo")
    return build_spec(dag, f"/d/{dag_id}.py")


def test_scheduler_lag_is_the_latest_scheduled_runs_creation_after_its_due_time(store):
    spec = make_spec()
    register(store, spec)
    with store.write() as conn:
        runs.create_runs(conn, spec, days(2), RunType.SCHEDULED, T0)
        conn.execute(update(dag_run).values(created_at=dag_run.c.data_interval_end))
        latest = days(2)[-1]
        conn.execute(
            update(dag_run)
            .where(dag_run.c.logical_date == latest.start)
            .values(created_at=latest.end + timedelta(seconds=42))
        )
    assert read(store).scheduler_lag == {"pipe": 42.0}


def test_runs_and_task_instances_by_dag_and_state(store):
    start(store, make_spec(), 2, 2)
    found = read(store)
    assert found.dag_runs == {("pipe", "running"): 2}
    assert found.dag_task_instances == {("pipe", "queued"): 2, ("pipe", "none"): 4}


def test_tasks_held_back_by_a_full_pool_and_by_max_active_tasks(store):
    capped, pooled = spec_of("capped", max_active_tasks=1), spec_of("pooled", pool="db")
    with store.write() as conn:
        pools.set_pool(conn, "db", 1, None)
    start(store, capped, 2, 2)
    start(store, pooled, 2, 2)
    claimed, _ = claim(store)
    assert sorted(c.dag_id for c in claimed) == ["capped", "pooled"]
    found = read(store)
    assert found.cap_waiting == {"capped": 1}
    assert found.pool_waiting == {"db": 1}
    assert set(found.pool_oldest_queued_age) == {"db", ""}


def test_runs_blocked_by_depends_on_past(store):
    with DAG(
        "past", schedule="@daily", start_date="2026-01-01", default_args={"depends_on_past": True}
    ) as dag:
        BashTask("a", command="echo")
    spec = build_spec(dag, "/d/past.py")
    start(store, spec, 1, 1)
    assert read(store).blocked_on_past == {}
    [only], _ = claim(store)
    complete(store, spec, outcome(only, AttemptOutcome.NON_RETRYABLE, error="boom"))
    with store.write() as conn:
        runs.create_runs(conn, spec, days(3), RunType.SCHEDULED, T0)
    assert read(store).blocked_on_past == {"past": 2}


def test_callbacks_by_dag_and_state(store):
    register(store, make_spec())
    with store.write() as conn:
        for state in (CallbackState.SENT, CallbackState.SENT, CallbackState.FAILED):
            conn.execute(
                insert(callback).values(
                    event="task_failure", dag_id="pipe", run_pk=1, state=state, created_at=T0
                )
            )
    assert read(store).callbacks == {("pipe", "sent"): 2, ("pipe", "failed"): 1}


def test_the_text_has_help_lines_and_escaped_labels():
    found = metrics.Metrics(
        runs={"running": 1},
        task_instances={"queued": 2},
        queued=2,
        oldest_queued_age=3.0,
        expired_leases=0,
        stale_completions=0,
        scheduler_lag={"nightly": 1.5},
        pool_waiting={'we"ird\\pool': 4},
    )
    text = metrics_text(found, clock_offset=-10800.25)
    assert "dagrun_clock_offset_seconds -10800.2" in text
    assert "# HELP dagrun_scheduler_lag_seconds " in text
    assert "# TYPE dagrun_callbacks_total counter" in text
    assert 'dagrun_scheduler_lag_seconds{dag_id="nightly"} 1.5' in text
    assert 'dagrun_pool_waiting_tasks{pool="we\\"ird\\\\pool"} 4' in text

"""Assets on SQLite and PostgreSQL: events written by the success of a task with outlets
(with its partition's fingerprint), and the scheduler's runs of an asset-scheduled DAG: one
per partition key once every asset has an event, none for unchanged content, a re-run (not a
second run) when a partition really changes, held while the run is running."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from dagrun import DAG, Asset, BashTask
from dagrun.errors import DagDefinitionError
from dagrun.parsing.loader import build_spec
from dagrun.parsing.spec import DagSpec, TaskSpec
from dagrun.runtime.scheduler import Scheduler
from dagrun.states import AttemptOutcome, RunState, RunType
from dagrun.store import Store, assets, attempts, operator_actions, run_reads, sql
from tests.helpers import bare_spec
from tests.store.test_store import claim, complete, make_spec, outcome, register, start


def event(store: Store, asset: str, key: str, fingerprint: str | None = None) -> None:
    with store.write() as conn:
        row = {
            "b_asset": asset,
            "b_partition_key": key,
            "b_fingerprint": fingerprint,
            "b_dag_id": "up",
            "b_run_pk": None,
            "b_task_id": "t",
            "b_created_at": store.now(conn),
        }
        sql.execute(conn, assets.Q.INSERT_ASSET_EVENTS, row)


def consumer(store: Store, *names: str) -> DagSpec:
    spec = dataclasses.replace(
        bare_spec(TaskSpec("report", "bash", ()), dag_id="report"), assets=names
    )
    register(store, spec)
    return spec


def report_runs(store: Store) -> list[run_reads.RunRow]:
    with store.read() as conn:
        return sorted(run_reads.runs(conn, "report"), key=lambda r: r.logical_date)


def tick(store: Store) -> None:
    Scheduler(store, None).tick()


def finish(store: Store, spec: DagSpec, run: run_reads.RunRow) -> None:
    with store.write() as conn:
        operator_actions.mark_run(conn, spec, run.id, RunState.SUCCESS, "done", store.now(conn))


def test_a_run_per_key_once_every_asset_has_an_event(store: Store):
    consumer(store, "a", "b")
    event(store, "a", "2026-01-05")
    tick(store)
    assert report_runs(store) == [], "b has no event for the key yet"
    event(store, "b", "2026-01-05")
    event(store, "b", "2026-01-06")
    tick(store)
    [run] = report_runs(store)
    assert (run.logical_date, run.run_type) == (datetime(2026, 1, 5, tzinfo=UTC), "asset")
    assert run.run_id == "asset__2026-01-05T00:00:00+00:00"
    assert run.data_interval_end == datetime(2026, 1, 6, tzinfo=UTC)
    tick(store)
    assert len(report_runs(store)) == 1, "no new event: no new run"
    event(store, "a", "2026-01-06")
    tick(store)
    assert [r.logical_date.day for r in report_runs(store)] == [5, 6]


def test_unchanged_content_runs_nothing_and_changed_content_reruns_the_key(store: Store):
    spec = consumer(store, "a")
    event(store, "a", "2026-01-05", "f1")
    tick(store)
    [run] = report_runs(store)
    finish(store, spec, run)
    event(store, "a", "2026-01-05", "f1")  # the upstream ran again and wrote the same bytes
    tick(store)
    [run] = report_runs(store)
    assert run.state == RunState.SUCCESS.value
    event(store, "a", "2026-01-05", "f2")
    tick(store)
    [again] = report_runs(store)
    assert again.id == run.id and again.state != RunState.SUCCESS.value, "the same run, re-run"


def test_a_running_run_is_rerun_only_after_it_ends(store: Store):
    spec = consumer(store, "a")
    event(store, "a", "2026-01-05", "f1")
    tick(store)
    [run] = report_runs(store)
    assert run.state == RunState.RUNNING.value
    event(store, "a", "2026-01-05", "f2")
    tick(store)
    assert report_runs(store)[0].state == RunState.RUNNING.value, "held while it runs"
    finish(store, spec, run)
    tick(store)
    [again] = report_runs(store)
    assert again.id == run.id and again.state == RunState.RUNNING.value, "re-run after the end"


def test_an_unknown_asset_leaves_the_dag_waiting_and_is_listed(store: Store):
    spec = consumer(store, "nothing")
    tick(store)
    assert report_runs(store) == []
    with store.read() as conn:
        [row] = assets.asset_rows(conn, [spec])
    assert (row.name, row.consumers, row.events, row.latest_key) == (
        "nothing",
        ("report",),
        0,
        None,
    )


def producer(store: Store) -> DagSpec:
    base = make_spec()
    tasks = tuple(
        dataclasses.replace(t, outlets=("extracted",)) if t.task_id == "extract" else t
        for t in base.tasks
    )
    spec = dataclasses.replace(base, tasks=tasks, timezone="Asia/Dhaka")
    register(store, spec)
    return spec


def events_of(store: Store) -> list[tuple]:
    with store.read() as conn:
        stmt = "SELECT asset, partition_key, fingerprint, task_id FROM asset_event ORDER BY id"
        return [tuple(r) for r in conn.exec_driver_sql(stmt)]


def test_a_success_with_outlets_writes_an_event_with_the_partition_fingerprint(store: Store):
    spec = producer(store)
    start(store, spec, 2, 2)
    first, second = claim(store)[0]
    with store.write() as conn:
        run_date = run_reads.run_by_pk(conn, first.run_pk).logical_date
        key = assets.partition_key(run_date, "Asia/Dhaka")
        attempts.record_partition_write(
            conn,
            dataset="extracted",
            partition_key=key,
            path="/data/extracted",
            rows=1,
            sha256="abc",
            unchanged=False,
            ti_id=first.ti_id,
            dag_id=spec.dag_id,
            task_id="extract",
            run_pk=first.run_pk,
            try_number=1,
            fence_token=first.fence_token,
            written_at=store.now(conn),
        )
    complete(store, spec, outcome(first), outcome(second, AttemptOutcome.FAILED))
    assert events_of(store) == [("extracted", key, "abc", "extract")]
    [load], _ = claim(store)
    complete(store, spec, outcome(load))
    assert len(events_of(store)) == 1, "a task without outlets writes none"


def test_the_partition_key_is_the_day_in_the_dags_zone():
    instant = datetime(2026, 1, 4, 18, 0, tzinfo=UTC)  # midnight on the 5th in Dhaka
    assert assets.partition_key(instant, "Asia/Dhaka") == "2026-01-05"
    assert assets.partition_key(instant, "UTC") == "2026-01-04"
    interval = assets.key_interval("2026-03-08", "America/New_York")  # 23 hours long
    assert (interval.end - interval.start).total_seconds() == 23 * 3600


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"schedule": []}, r"schedule=\[\] lists no asset"),
        ({"schedule": [Asset("a"), "b"]}, "schedule must be a list of Asset"),
    ],
)
def test_bad_asset_schedules_are_definition_errors(kwargs, message):
    with pytest.raises(DagDefinitionError, match=message):
        DAG("d", **kwargs)


def test_outlets_and_asset_schedules_reach_the_spec():
    with DAG("up", schedule="@daily", start_date="2026-01-01") as up:
        BashTask("t", command="true", outlets=[Asset("s3://bucket/sales"), Asset("b")])
    with DAG("down", schedule=[Asset("b"), Asset("b")]) as down:
        BashTask("t", command="true")
    assert build_spec(up, "/up.py").task_map["t"].outlets == ("s3://bucket/sales", "b")
    spec = build_spec(down, "/down.py")
    assert spec.assets == ("b",) and spec.schedule_text == "assets: b"
    assert DagSpec.from_json(spec.to_json()) == spec
    bad = pytest.raises(DagDefinitionError, match="outlets must be a list of Asset")
    with bad, DAG("bad", schedule=None):
        BashTask("t", command="true", outlets=["b"])
    with pytest.raises(DagDefinitionError, match="asset name"):
        Asset("has space")
    assert RunType.ASSET.value == "asset"


def test_assets_list_has_every_partition_key_with_its_latest_event_and_consumers(store: Store):
    """After two days were produced, ``assets list`` named only the latest key: the contract
    is, per key, the latest event, its fingerprint and the runs that consumed it."""
    spec = consumer(store, "a")
    event(store, "a", "2026-01-05", "f1")
    event(store, "a", "2026-01-06", "g1")
    tick(store)
    first, second = report_runs(store)
    finish(store, spec, second)
    event(store, "a", "2026-01-06", "g1")  # the same bytes again: consumed, not re-run
    tick(store)
    event(store, "a", "2026-01-05", "f2")  # first is still running: it has not consumed it
    with store.read() as conn:
        [row] = assets.asset_rows(conn, [spec])
    assert (row.events, row.latest_key) == (4, "2026-01-06")
    assert [(p.key, p.events, p.latest.fingerprint) for p in row.partitions] == [
        ("2026-01-05", 2, "f2"),
        ("2026-01-06", 2, "g1"),
    ]
    day5, day6 = row.partitions
    assert [(c.dag_id, c.run_id, c.latest) for c in day5.consumers] == [
        ("report", first.run_id, False)
    ]
    assert [(c.dag_id, c.run_id, c.latest) for c in day6.consumers] == [
        ("report", second.run_id, True)
    ]
    shown = row.to_json()
    assert [p["partition_key"] for p in shown["partitions"]] == ["2026-01-05", "2026-01-06"]
    assert shown["partitions"][0]["fingerprint"] == "f2"
    assert shown["partitions"][1]["consumed_by"] == [
        {"dag_id": "report", "run_id": second.run_id, "latest_event": True}
    ]
    assert shown["latest_partition_key"] == "2026-01-06" and shown["events"] == 4


def test_a_run_an_asset_condition_triggered_consumed_the_keys_of_its_events(store: Store):
    spec = dataclasses.replace(
        bare_spec(TaskSpec("report", "bash", ()), dag_id="join"),
        condition=(Asset("a") & Asset("b")).to_data(),
    )
    register(store, spec)
    event(store, "a", "2026-01-01")
    event(store, "b", "2026-01-09")
    tick(store)
    with store.read() as conn:
        [run] = run_reads.runs(conn, "join")
        rows = {r.name: r for r in assets.asset_rows(conn, [spec])}
    assert [(p.key, [c.run_id for c in p.consumers]) for p in rows["a"].partitions] == [
        ("2026-01-01", [run.run_id])
    ]
    assert rows["b"].partitions[0].consumers[0].dag_id == "join"

"""Asset conditions on SQLite and PostgreSQL (Airflow's meaning): a run when the condition
holds over the assets with new events since the DAG's last asset-triggered run, whatever
the partition keys; each run consumes the events it was made from, so they trigger once;
two schedulers make one run of one set of events; logical dates never collide."""

from __future__ import annotations

import dataclasses
import json
import threading
from datetime import UTC, datetime, timedelta

import pytest

from dagrun import DAG, Asset, BashTask
from dagrun.authoring.assets import AssetAll, AssetAny, AssetOrTimeSchedule
from dagrun.errors import DagDefinitionError, StoreConflict
from dagrun.parsing.loader import build_spec
from dagrun.parsing.spec import DagSpec, TaskSpec
from dagrun.runtime.scheduler import Scheduler
from dagrun.store import Store, asset_triggers, dag_reads, registry, run_reads, sql
from dagrun.store.queries.assets import INSERT_ASSET_EVENTS
from dagrun.timing.schedules import CronTrigger
from tests.helpers import bare_spec
from tests.store.test_store import register

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


def event(store: Store, asset: str, key: str = "2026-01-05", at: datetime | None = None) -> None:
    with store.write() as conn:
        row = {
            "b_asset": asset,
            "b_partition_key": key,
            "b_fingerprint": None,
            "b_dag_id": "up",
            "b_run_pk": None,
            "b_task_id": "t",
            "b_created_at": at or store.now(conn),
        }
        sql.execute(conn, INSERT_ASSET_EVENTS, row)


def consumer(store: Store, condition, dag_id: str = "report", **fields) -> DagSpec:
    spec = dataclasses.replace(
        bare_spec(TaskSpec("report", "bash", ()), dag_id=dag_id),
        condition=condition.to_data(),
        **fields,
    )
    register(store, spec)
    return spec


def report_runs(store: Store, dag_id: str = "report") -> list[run_reads.RunRow]:
    with store.read() as conn:
        return sorted(run_reads.runs(conn, dag_id), key=lambda r: r.logical_date)


def tick(store: Store, clock: datetime | None = None) -> None:
    kwargs = {"clock": lambda: clock} if clock else {}
    Scheduler(store, None, **kwargs).tick()


def triggering(store: Store, run: run_reads.RunRow) -> dict[str, list[str]]:
    with store.read() as conn:
        found = asset_triggers.triggering_events(conn, run.id)
    return {asset: [e.partition_key for e in events] for asset, events in found.items()}


A, B, C = Asset("a"), Asset("b"), Asset("c")


def test_all_runs_once_every_asset_has_a_new_event_whatever_the_keys(store: Store):
    consumer(store, A & B)
    event(store, "a", "2026-01-01", at=T0 - timedelta(hours=2))
    tick(store)
    assert report_runs(store) == [], "b has no new event yet"
    event(store, "a", "2026-01-02", at=T0 - timedelta(hours=1))
    event(store, "b", "2026-01-09", at=T0)  # the newest event dates the run
    tick(store)
    [run] = report_runs(store)
    assert (run.run_type, run.logical_date, run.data_interval_end) == ("asset", T0, T0)
    assert run.run_id == "asset__2026-01-05T12:00:00+00:00"
    assert triggering(store, run) == {"a": ["2026-01-01", "2026-01-02"], "b": ["2026-01-09"]}
    tick(store)
    assert len(report_runs(store)) == 1, "the events were consumed: nothing new"


def test_any_runs_for_each_new_event_of_either(store: Store):
    consumer(store, A | B)
    event(store, "b")
    tick(store)
    event(store, "a")
    tick(store)
    runs = report_runs(store)
    assert [list(triggering(store, r)) for r in runs] == [["b"], ["a"]]


def test_a_nested_condition_is_evaluated_over_the_new_events(store: Store):
    consumer(store, A & (B | C))
    event(store, "c")
    tick(store)
    assert report_runs(store) == []
    event(store, "a")
    tick(store)
    assert [sorted(triggering(store, r)) for r in report_runs(store)] == [["a", "c"]]
    event(store, "b")
    tick(store)
    assert len(report_runs(store)) == 1, "b alone: a has no new event since the last run"
    event(store, "a")
    tick(store)
    assert sorted(triggering(store, report_runs(store)[-1])) == ["a", "b"]


def test_a_run_consumes_every_new_event_of_its_assets_at_once(store: Store):
    """Airflow clears the DAG's whole queue with the run it makes: with ``a | b`` and new
    events of both, one run consumes them all."""
    consumer(store, AssetAny(A, B))
    for asset in ("a", "a", "b"):
        event(store, asset)
    tick(store)
    [run] = report_runs(store)
    assert {k: len(v) for k, v in triggering(store, run).items()} == {"a": 2, "b": 1}


def test_events_from_before_the_dag_existed_trigger_nothing(store: Store):
    event(store, "a")
    event(store, "b")
    consumer(store, AssetAll(A, B))
    tick(store)
    assert report_runs(store) == []
    event(store, "a")
    event(store, "b")
    tick(store)
    assert len(report_runs(store)) == 1


def test_a_second_registration_keeps_the_cursor(store: Store):
    spec = consumer(store, A)
    event(store, "a")
    register(store, spec)  # the file parsed again: its pending event still counts
    tick(store)
    assert len(report_runs(store)) == 1


def test_two_triggers_at_one_instant_get_distinct_logical_dates(store: Store):
    consumer(store, A)
    event(store, "a", at=T0)
    tick(store)
    event(store, "a", at=T0)  # recorded at the very same instant
    tick(store)
    assert [r.logical_date for r in report_runs(store)] == [T0, T0 + timedelta(microseconds=1)]


def test_an_asset_run_never_takes_a_date_its_timetable_schedules(store: Store):
    schedule = CronTrigger("0 12 * * *")
    consumer(store, A, schedule=schedule.to_data(), start_date="2026-01-05T00:00:00+00:00")
    event(store, "a", at=T0)  # exactly when the daily trigger fires
    tick(store, clock=T0 - timedelta(seconds=1))
    [asset_run] = report_runs(store)
    assert asset_run.logical_date == T0 + timedelta(microseconds=1)
    tick(store, clock=T0)
    assert [(r.run_type, r.logical_date) for r in report_runs(store)] == [
        ("scheduled", T0),
        ("asset", T0 + timedelta(microseconds=1)),
    ]


def test_two_schedulers_make_one_run_of_one_set_of_events(store: Store):
    consumer(store, A & B)
    event(store, "a")
    event(store, "b")
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def scheduler() -> None:
        try:
            barrier.wait(timeout=30)
            for _ in range(3):
                Scheduler(store, None).tick()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=scheduler) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert len(report_runs(store)) == 1


def test_a_stale_cursor_moves_nothing(store: Store):
    """The guard behind the DAG lock: events read after a cursor another scheduler has
    since moved cannot be consumed again (the transaction rolls back)."""
    spec = consumer(store, A)
    event(store, "a")
    with store.write() as conn:
        before = sql.scalar(conn, dag_reads.Q.ASSET_CURSOR, {"b_dag_id": "report"})
    tick(store)
    with pytest.raises(StoreConflict), store.write() as conn:
        params = {"b_dag_id": spec.dag_id, "b_after": before, "b_upto": before + 1}
        if not sql.execute(conn, asset_triggers.Q.ADVANCE_CURSOR, params).rowcount:
            raise StoreConflict("consumed meanwhile")
    assert len(report_runs(store)) == 1


def test_a_partition_keyed_dag_on_the_same_asset_keeps_its_meaning(store: Store):
    consumer(store, A)
    keyed = dataclasses.replace(bare_spec(TaskSpec("t", "bash", ()), dag_id="keyed"), assets=("a",))
    register(store, keyed)
    event(store, "a", "2026-01-01")
    event(store, "a", "2026-01-02")
    tick(store)
    assert len(report_runs(store)) == 1, "one run for the new events, whatever their keys"
    assert [r.logical_date.day for r in report_runs(store, "keyed")] == [1, 2]


def test_a_paused_dag_counts_the_events_it_missed_when_unpaused(store: Store):
    consumer(store, A)
    with store.write() as conn:
        registry.set_paused(conn, "report", True)
    event(store, "a")
    tick(store)
    assert report_runs(store) == []
    with store.write() as conn:
        registry.set_paused(conn, "report", False)
    tick(store)
    assert len(report_runs(store)) == 1


# --- authoring: what reaches the spec ----------------------------------------------------------


def test_conditions_reach_the_spec_and_lists_of_native_assets_keep_their_meaning():
    with DAG("cond", schedule=A & (B | C)) as cond:
        BashTask("t", command="true")
    with DAG("keyed", schedule=[A, B]) as keyed:
        BashTask("t", command="true")
    with DAG(
        "both",
        schedule=AssetOrTimeSchedule(timetable=CronTrigger("0 1 * * *"), assets=[A, B]),
        start_date="2026-01-01",
    ) as both:
        BashTask("t", command="true")
    spec = build_spec(cond, "/c.py")
    assert spec.condition == {"all": ["a", {"any": ["b", "c"]}]} and spec.assets == ()
    assert spec.schedule_text == "assets: a & (b | c)"
    assert DagSpec.from_json(spec.to_json()) == spec
    keyed_spec = build_spec(keyed, "/k.py")
    assert keyed_spec.assets == ("a", "b") and keyed_spec.condition is None
    stored_before = json.loads(keyed_spec.to_json())
    del stored_before["condition"]  # a spec stored before conditions existed
    assert DagSpec.from_json(json.dumps(stored_before)) == keyed_spec
    mixed = build_spec(both, "/b.py")
    assert mixed.condition == {"all": ["a", "b"]}
    assert mixed.schedule_text == "assets: a & b or trigger 0 1 * * *"
    assert DagSpec.from_json(mixed.to_json()).timetable.description == "trigger 0 1 * * *"


def test_conditions_flatten_and_compare():
    assert AssetAll(A, B, C) == A & B & C
    assert AssetAny(A, B, C) == (A | B) | C
    assert AssetAny(AssetAll(A, B), C) == (A & B) | C
    assert Asset("a", extra={"owner": "x"}) == A, "extra is not part of an asset's identity"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: AssetAll(), r"AssetAll\(\) names no asset"),
        (lambda: AssetAny(A, "b"), "AssetAny takes assets and asset conditions"),
        (lambda: Asset("a", extra={"x": object()}), "extra must be a JSON object"),
        (lambda: Asset("a", extra=[1]), "extra must be a JSON object"),
        (lambda: AssetOrTimeSchedule(timetable=None, assets=[A]), "needs a time schedule"),
        (lambda: DAG("d", schedule=[A & B, "c"]), "schedule must be a list of Asset"),
    ],
)
def test_bad_conditions_are_definition_errors(make, message):
    with pytest.raises(DagDefinitionError, match=message):
        make()


def test_an_event_committed_after_a_later_one_is_not_lost(store: Store):
    """PostgreSQL hands out ids at insert time: an event written first but committed after
    a later one must still trigger. A tick waits (briefly) for writers in flight; one that
    outlasts the wait leaves both events for a later tick, never the later one alone."""
    if not store.caps.concurrent_writers:
        pytest.skip("one writer at a time: ids always commit in order")
    consumer(store, A)
    writing, release = threading.Event(), threading.Event()

    def slow_writer() -> None:
        with store.write() as conn:
            row = {
                "b_asset": "a",
                "b_partition_key": "k",
                "b_fingerprint": None,
                "b_dag_id": "up",
                "b_run_pk": None,
                "b_task_id": "slow",
                "b_created_at": T0,
            }
            sql.execute(conn, INSERT_ASSET_EVENTS, row)
            writing.set()
            release.wait(timeout=30)

    writer = threading.Thread(target=slow_writer)
    writer.start()
    assert writing.wait(timeout=30)
    event(store, "a", at=T0)  # a higher id, committed first
    tick(store)  # the writer outlasts the tick's wait: nothing is settled past it
    release.set()
    writer.join(timeout=30)
    assert report_runs(store) == []
    tick(store)
    [run] = report_runs(store)
    assert len(triggering(store, run)["a"]) == 2, "both events consumed, none left behind"

"""Airflow's timetable and asset names (dagrun.airflow.timetables, dagrun.airflow.assets)
build dagrun's own schedule objects and asset conditions, with Airflow's signatures and
meanings: a list of Airflow assets is "all of them, any partition"; assets are told apart
by URI."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from dateutil.relativedelta import relativedelta

from dagrun import DAG, AssetAll, BashTask, CronIntervals, CronTrigger, DeltaIntervals
from dagrun.airflow.assets import (
    Asset,
    AssetAny,
    AssetOrTimeSchedule,
    Dataset,
    DatasetAll,
    DatasetOrTimeSchedule,
)
from dagrun.airflow.timetables import (
    CronDataIntervalTimetable,
    CronTriggerTimetable,
    DeltaDataIntervalTimetable,
)
from dagrun.errors import DagDefinitionError, ScheduleError
from dagrun.parsing.loader import build_spec
from dagrun.timing.timetable import DataInterval, make_timetable


class PendulumLikeZone:
    """What a pendulum 2 zone offers: its IANA name."""

    name = "Asia/Dhaka"


def test_airflow_timetables_are_the_native_schedule_objects():
    trigger = CronTriggerTimetable(
        "0 1 * * *", timezone=ZoneInfo("Europe/Paris"), interval=relativedelta(hours=2)
    )
    assert (
        trigger.to_data()
        == CronTrigger("0 1 * * *", timezone="Europe/Paris", interval="2h").to_data()
    )
    assert CronTriggerTimetable("@daily", timezone="UTC", run_immediately=True).run_immediately
    intervals = CronDataIntervalTimetable("0 1 * * *", timezone=PendulumLikeZone())
    assert intervals.to_data() == CronIntervals("0 1 * * *", "Asia/Dhaka").to_data()
    delta = DeltaDataIntervalTimetable(relativedelta(days=1, hours=6))
    assert delta.to_data() == DeltaIntervals(timedelta(days=1, hours=6)).to_data()


def test_a_trigger_timetable_fires_at_its_cron_times_in_its_own_zone():
    timetable = make_timetable(
        CronTriggerTimetable("0 1 * * *", timezone="Asia/Dhaka"), "UTC", "2026-01-01"
    )
    first = datetime(2026, 1, 1, 19, 0, tzinfo=UTC)  # 01:00 on the 2nd in Dhaka
    assert timetable.next_interval(None) == DataInterval(first, first)


def test_months_are_no_fixed_interval():
    with pytest.raises(ScheduleError, match="months and years are not fixed durations"):
        DeltaDataIntervalTimetable(relativedelta(months=1))
    with pytest.raises(ScheduleError, match="interval relativedelta"):
        CronTriggerTimetable("@daily", timezone="UTC", interval=relativedelta(years=1))


def test_an_airflow_asset_is_known_by_its_uri_and_carries_extra():
    both = Asset(name="orders", uri="s3://lake/orders", extra={"owner": "sales"})
    assert (both.key, both.name, both.group, both.extra) == (
        "s3://lake/orders",
        "orders",
        "asset",
        {"owner": "sales"},
    )
    assert Asset("x").uri == "x" and Asset(uri="y").name == "y" and Asset("x").extra == {}
    assert Dataset("s3://lake/x").group == "dataset"
    assert Asset("x", extra={"a": 1}) == Asset("x")
    assert (
        (Asset("a") & Dataset("b"))
        == DatasetAll(Asset("a"), Dataset("b"))
        == AssetAll(Asset("a"), Dataset("b"))
    )


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Asset(), "needs a name or a uri"),
        (lambda: Asset("  "), "not only spaces"),
        (lambda: Asset("caf\u00e9"), "ASCII"),
        (lambda: Asset("x" * 251), "1-250"),
        (lambda: Asset("airflow://x"), "reserved"),
        (lambda: Asset("x", extra={"n": {1, 2}}), "extra must be a JSON object"),
    ],
)
def test_bad_airflow_assets_are_definition_errors(make, message):
    with pytest.raises(DagDefinitionError, match=message):
        make()


def test_a_list_of_airflow_assets_is_a_condition_and_outlets_record_uris():
    orders, customers = Asset("s3://lake/orders"), Dataset("s3://lake/customers")
    with DAG("join", schedule=[orders, customers]) as join:
        BashTask("t", command="true", outlets=[Asset(name="report", uri="s3://lake/report")])
    spec = build_spec(join, "/join.py")
    assert spec.condition == {"all": ["s3://lake/orders", "s3://lake/customers"]}
    assert spec.assets == ()
    assert spec.task_map["t"].outlets == ("s3://lake/report",)
    with DAG(
        "both",
        start_date="2026-01-01",
        schedule=DatasetOrTimeSchedule(
            timetable=CronTriggerTimetable("0 0 * * *", timezone="UTC"),
            datasets=AssetAny(orders, customers),
        ),
    ) as both:
        BashTask("t", command="true")
    spec = build_spec(both, "/both.py")
    assert spec.condition == {"any": ["s3://lake/orders", "s3://lake/customers"]}
    assert spec.timetable.description == "trigger 0 0 * * *"
    assert isinstance(AssetOrTimeSchedule(timetable="@daily", assets=[orders]).condition, AssetAll)

"""Assets with a real `dagrun scheduler` on SQLite and PostgreSQL: backfilling the upstream
fills the asset-scheduled downstream, one run per day; a day whose partition really changed
is re-run, one whose bytes are the same is not; `assets list` shows it all."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dagrun.store import Store
from tests.helpers import (
    cli_json,
    db_rows,
    run_cli,
    start_cli,
    stop_process,
    wait_until,
    write_dag,
)

pytestmark = pytest.mark.slow

# The daily summary partition; its total comes from a file, so a test can change the data.
UPSTREAM = """
from pathlib import Path
from dagrun import DAG, Asset, partition, task

with DAG("sales", schedule="@daily", start_date="2026-01-01", catchup=False):
    @task(outlets=[Asset("daily_summary")])
    def summarise(ds):
        import pandas as pd
        total = int(Path({total!r}).read_text())
        partition("daily_summary", ds).write(pd.DataFrame({{"ds": [ds], "total": [total]}}))

    summarise()
"""

DOWNSTREAM = """
from dagrun import DAG, Asset, partition, task

with DAG("report", schedule=[Asset("daily_summary")]):
    @task
    def report(ds):
        return int(partition("daily_summary", ds).read()["total"][0])

    report()

with DAG("never", schedule=[Asset("nobody_makes_this")]):
    @task
    def wait():
        pass

    wait()
"""

DAYS = ["2026-01-01", "2026-01-02", "2026-01-03"]


def reports(env: dict[str, str]) -> dict[str, tuple[str, int, str | None]]:
    """ds -> (run state, try number of its task, its return value)."""
    rows = db_rows(
        env,
        "SELECT r.logical_date, r.state, t.try_number, t.return_value FROM dag_run r "
        "JOIN task_instance t ON t.run_pk = r.id WHERE r.dag_id = 'report'",
    )
    return {str(d)[:10]: (state, tries, value) for d, state, tries, value in rows}


def test_backfilling_the_upstream_fills_the_asset_scheduled_downstream(
    db_url, dags_dir, tmp_path, cli_env
):
    total = tmp_path / "total"
    total.write_text("7")
    write_dag(dags_dir, "sales.py", UPSTREAM.format(total=str(total)))
    write_dag(dags_dir, "report.py", DOWNSTREAM)
    env = {**cli_env, "DAGRUN_DB_URL": db_url}
    Store(db_url).dispose()
    scheduler = start_cli(
        "scheduler", "--workers", "2", "--poll", "0.2", env=env, log=tmp_path / "s.log"
    )
    try:
        done = run_cli("backfill", "sales", "--start", DAYS[0], "--end", DAYS[-1], env=env)
        assert done.returncode == 0, done.stdout + done.stderr

        def filled() -> bool:
            got = reports(env)
            return all(got.get(day, ("",))[0] == "success" for day in DAYS)

        wait_until(filled, 60, interval=0.2, what="a report run per backfilled day")
        assert {day: reports(env)[day] for day in DAYS} == {
            day: ("success", 1, "7") for day in DAYS
        }

        same = run_cli(
            "backfill", "sales", "--start", DAYS[0], "--end", DAYS[0], "--reset", env=env
        )
        assert same.returncode == 0, same.stdout + same.stderr
        total.write_text("9")
        changed = run_cli(
            "backfill", "sales", "--start", DAYS[1], "--end", DAYS[1], "--reset", env=env
        )
        assert changed.returncode == 0, changed.stdout + changed.stderr
        wait_until(
            lambda: reports(env)[DAYS[1]] == ("success", 2, "9"),
            60,
            interval=0.2,
            what="the changed day's report to run again",
        )
    finally:
        stop_process(scheduler)
    got = reports(env)
    assert got[DAYS[0]] == ("success", 1, "7"), "the same bytes again: no re-run"
    assert got[DAYS[2]] == ("success", 1, "7")
    runs = db_rows(
        env, "SELECT count(*), count(DISTINCT logical_date) FROM dag_run WHERE dag_id = 'report'"
    )
    assert runs[0][0] == runs[0][1], "one run per key, re-run rather than duplicated"
    assert db_rows(env, "SELECT count(*) FROM dag_run WHERE dag_id = 'never'") == [(0,)]
    listed = {a["name"]: a for a in json.loads(run_cli("assets", "list", "--json", env=env).stdout)}
    assert listed["daily_summary"]["producers"] == ["sales.summarise"]
    assert listed["daily_summary"]["consumers"] == ["report"]
    # the scheduler's own run of today (catchup=False) may have added today's key
    keys = [p for p in listed["daily_summary"]["partitions"] if p["partition_key"] in DAYS]
    assert [p["partition_key"] for p in keys] == DAYS, "every key, not only the latest"
    assert [p["events"] for p in keys] == [2, 2, 1]
    assert all(len(p["fingerprint"]) == 64 for p in keys), "each key's partition's sha256"
    for p in keys:
        [taken] = p["consumed_by"]
        assert taken["dag_id"] == "report" and taken["latest_event"], p
        assert taken["run_id"] == f"asset__{p['partition_key']}T00:00:00+00:00"
    table = run_cli("assets", "list", env=env).stdout
    assert all(f"{day}  " in table for day in DAYS), table
    assert listed["nobody_makes_this"]["events"] == 0
    assert listed["nobody_makes_this"]["consumers"] == ["never"]
    shown = run_cli("dags", "list", env=env).stdout
    assert "assets: daily_summary" in shown and "assets: nobody_makes_this" in shown
    assert Path(tmp_path / "data" / "daily_summary" / f"ds={DAYS[1]}").exists()


def test_the_example_weekly_report_runs_for_each_backfilled_day(cli_env, dags_dir, tmp_path):
    """The README's example: backfilling nightly_sales fills weekly_sales (the upstream is
    paused so the scheduler makes no runs of its own for it)."""
    repo = Path(__file__).resolve().parents[2]
    for name in ("nightly_sales.py", "weekly_sales.py"):
        (dags_dir / name).write_text((repo / "dags" / name).read_text())
    assert run_cli("dags", "pause", "nightly_sales", env=cli_env).returncode == 0
    done = run_cli("backfill", "nightly_sales", "--start", DAYS[0], "--end", DAYS[-1], env=cli_env)
    assert done.returncode == 0, done.stdout + done.stderr
    scheduler = start_cli(
        "scheduler", "--workers", "2", "--poll", "0.2", env=cli_env, log=tmp_path / "s.log"
    )
    try:

        def weekly() -> list[tuple]:
            return db_rows(
                cli_env,
                "SELECT logical_date, state FROM dag_run WHERE dag_id = 'weekly_sales' "
                "ORDER BY logical_date",
            )

        wait_until(
            lambda: [s for _, s in weekly()] == ["success"] * len(DAYS),
            60,
            interval=0.2,
            what="a weekly_sales run per backfilled day",
        )
    finally:
        stop_process(scheduler)
    data = Path(cli_env["DAGRUN_DATA"]) / "weekly_sales"
    assert sorted(p.name for p in data.iterdir()) == [f"ds={day}" for day in DAYS]


# Airflow's style (the names dagrun.airflow.assets gives an Airflow file; the DAG and the
# task are native here, since the `airflow` import alias is not this test's concern).
AIRFLOW_STYLE = """
from dagrun import DAG, task
from dagrun.airflow.assets import Asset, AssetOrTimeSchedule, Dataset
from dagrun.airflow.timetables import CronTriggerTimetable

orders = Asset("s3://lake/orders", extra={"owner": "sales"})
customers = Dataset("s3://lake/customers")

with DAG("produce_orders", schedule=None):
    @task(outlets=[orders])
    def write_orders():
        return "orders"

    write_orders()

with DAG("produce_customers", schedule=None):
    @task(outlets=[customers])
    def write_customers():
        return "customers"

    write_customers()

with DAG("join", schedule=[orders, customers]):
    @task
    def join():
        return "joined"

    join()

with DAG("either", schedule=orders | customers):
    @task
    def either():
        return "either"

    either()

with DAG("orders_or_yearly", start_date="2030-01-01",
         schedule=AssetOrTimeSchedule(
             timetable=CronTriggerTimetable("0 0 1 1 *", timezone="UTC"), assets=[orders])):
    @task
    def yearly():
        return "yearly"

    yearly()
"""


def test_an_airflow_style_outlet_triggers_the_dags_scheduled_on_it(
    db_url, dags_dir, tmp_path, cli_env
):
    """Airflow's meaning: a list of its assets means all of them, any partition key; each
    event triggers a DAG once; ``|`` runs on either."""
    write_dag(dags_dir, "lake.py", AIRFLOW_STYLE)
    env = {**cli_env, "DAGRUN_DB_URL": db_url}
    Store(db_url).dispose()

    def runs_of(dag_id: str) -> list[tuple]:
        return db_rows(
            env,
            f"SELECT run_type, state FROM dag_run WHERE dag_id = '{dag_id}' ORDER BY id",
        )

    scheduler = start_cli(
        "scheduler", "--workers", "2", "--poll", "0.2", env=env, log=tmp_path / "s.log"
    )
    try:
        done = run_cli("run", "produce_orders", "--date", "2026-01-01", env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        wait_until(
            lambda: (
                runs_of("either") == [("asset", "success")]
                and runs_of("orders_or_yearly") == [("asset", "success")]
            ),
            60,
            interval=0.2,
            what="the DAGs on orders alone to run",
        )
        assert runs_of("join") == [], "customers has no event yet"
        done = run_cli("run", "produce_customers", "--date", "2026-01-07", env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        wait_until(
            lambda: runs_of("join") == [("asset", "success")] and len(runs_of("either")) == 2,
            60,
            interval=0.2,
            what="join to run on both, whatever their partition keys",
        )
        wait_until(
            lambda: runs_of("either")[-1] == ("asset", "success"), 60, interval=0.2, what="either"
        )
    finally:
        stop_process(scheduler)
    assert len(runs_of("orders_or_yearly")) == 1, "each event triggers a DAG once"
    consumed = db_rows(
        env,
        "SELECT e.asset, e.partition_key FROM asset_trigger t "
        "JOIN asset_event e ON e.id = t.event_id JOIN dag_run r ON r.id = t.run_pk "
        "WHERE r.dag_id = 'join' ORDER BY e.asset",
    )
    assert consumed == [("s3://lake/customers", "2026-01-07"), ("s3://lake/orders", "2026-01-01")]
    shown = {d["dag_id"]: d["schedule"] for d in cli_json("dags", "list", env=env)}
    assert shown["join"] == "assets: s3://lake/orders & s3://lake/customers"
    assert shown["either"] == "assets: s3://lake/orders | s3://lake/customers"
    assert shown["orders_or_yearly"] == "assets: s3://lake/orders or trigger 0 0 1 1 *"
    listed = {a["name"]: a for a in cli_json("assets", "list", env=env)}
    assert sorted(listed["s3://lake/orders"]["consumers"]) == ["either", "join", "orders_or_yearly"]

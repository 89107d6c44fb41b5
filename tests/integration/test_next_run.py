"""The next run, as ``dags list`` and ``dags next`` show it: one answer, Airflow's "next
dagrun", the next logical date the scheduler will create given catchup and the runs made."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.helpers import cli_json, write_dag

DAILY = """
from dagrun import DAG, BashTask

with DAG("{dag_id}", schedule="@daily", start_date="2026-01-01", catchup={catchup}):
    BashTask("t", command="true")
"""

DAGS = {
    "fresh_catchup": True,
    "fresh_latest": False,
    "ran_catchup": True,
    "ran_latest": False,
}


def backfill_first_days(env: dict[str, str], dag_ids: list[str]) -> None:
    """Backfill runs for 2026-01-01 to 2026-01-03, made as a backfill makes them."""
    from dagrun.runtime.dag_sync import sync_dags
    from dagrun.states import RunType
    from dagrun.store import Store, dag_reads, runs

    Path(env["DAGRUN_HOME"]).mkdir(exist_ok=True)
    store = Store(env["DAGRUN_DB_URL"])
    try:
        sync_dags(store, env["DAGRUN_DAGS_FOLDER"])
        with store.write() as conn:
            for dag_id in dag_ids:
                spec = dag_reads.get_dag(conn, dag_id).spec
                days = spec.timetable.intervals(
                    datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 3, tzinfo=UTC)
                )
                runs.create_runs(conn, spec, days, RunType.BACKFILL, store.now(conn))
    finally:
        store.dispose()


@pytest.mark.slow
def test_dags_list_and_dags_next_agree_with_and_without_runs_and_catchup(cli_env, dags_dir):
    for dag_id, catchup in DAGS.items():
        write_dag(dags_dir, f"{dag_id}.py", DAILY.format(dag_id=dag_id, catchup=catchup))
    backfill_first_days(cli_env, ["ran_catchup", "ran_latest"])
    before = datetime.now(UTC)
    listed = {d["dag_id"]: d["next_logical_date"] for d in cli_json("dags", "list", env=cli_env)}
    after = datetime.now(UTC)
    upcoming = {
        dag_id: [
            e["logical_date"] for e in cli_json("dags", "next", dag_id, "-n", "2", env=cli_env)
        ]
        for dag_id in DAGS
    }

    yesterday = {  # the latest complete interval, whichever side of midnight the test ran
        (moment.replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=1)).isoformat()
        for moment in (before, after)
    }
    assert listed["fresh_catchup"] == "2026-01-01T00:00:00+00:00"  # from start_date
    assert listed["ran_catchup"] == "2026-01-04T00:00:00+00:00"  # after the runs made
    assert listed["fresh_latest"] in yesterday  # catchup=False: the latest missed interval
    assert listed["ran_latest"] in yesterday
    for dag_id in DAGS:
        first, second = (datetime.fromisoformat(d) for d in upcoming[dag_id])
        assert first.isoformat() == listed[dag_id], dag_id
        assert second - first == timedelta(days=1), dag_id

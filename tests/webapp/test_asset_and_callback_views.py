"""Operations on the web page and API: the assets DAGs wait for and produce (with what each
waiting DAG consumed), the callbacks a run fired, and conf and audit details escaped. The
store is filled by the real transitions (claim, complete, the scheduler's asset look) and
the app is called in-process (``tests.webapp.test_webapp.call``)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from dagrun.parsing.spec import DagSpec
from dagrun.runtime.dag_sync import sync_dags
from dagrun.store import Store, assets, audit, callbacks, dag_reads, runs, sql
from dagrun.timing.timetable import DataInterval
from dagrun.webapp import WebApp, run_url
from tests.helpers import write_dag
from tests.webapp.test_webapp import OWNER, append_log, call, make_runs, work_off

XSS = "<script>alert('x')</script>"

DAGS = """
    from dagrun import DAG, Asset, task

    def heard(context):
        pass

    with DAG("sales", schedule="@daily", start_date="2026-01-01"):
        @task(outlets=[Asset("daily_summary")], on_failure_callback=heard)
        def summarise(ds):
            return 1

        summarise()

    with DAG("report", schedule=[Asset("daily_summary")]):
        @task
        def report():
            return 1

        report()

    with DAG("joined", schedule=[Asset("daily_summary"), Asset("nobody_makes_this")]):
        @task
        def join():
            return 1

        join()
    """


def spec_of(store: Store, dag_id: str) -> DagSpec:
    with store.read() as conn:
        return dag_reads.get_dag(conn, dag_id).spec


def look(store: Store, dag_id: str) -> None:
    """What the scheduler does for an asset-scheduled DAG, without making its runs."""
    spec = spec_of(store, dag_id)
    with store.write() as conn:
        found = assets.look(conn, spec)
        for due in [*found.due, *found.settled]:
            assets.consume(conn, spec, due, store.now(conn))
        if found.cursor is not None:
            assets.move_cursor(conn, spec, found.cursor)


def fail_day_2(claim) -> str | None:
    return XSS if claim.logical_date.day == 2 else None


@pytest.fixture
def app(sqlite_store: Store, tmp_path: Path) -> WebApp:
    """Two days of sales (day 2 fails, firing its callback); report and joined looked."""
    write_dag(tmp_path / "dags", "sales.py", DAGS)
    sync_dags(sqlite_store, str(tmp_path / "dags"))
    make_runs(sqlite_store, spec_of(sqlite_store, "sales"), 2)
    work_off(sqlite_store, spec_of(sqlite_store, "sales"), tmp_path / "logs", fail_day_2)
    look(sqlite_store, "report")
    look(sqlite_store, "joined")
    return WebApp(sqlite_store, logs_root=tmp_path / "logs")


def rows_by_asset(page: str, table: str) -> dict[str, str]:
    """Each row of one table of the page, by its data-asset."""
    body = page.split(f'<table class="list {table}">')[1].split("</table>")[0]
    return {row.split('"', 1)[0]: row for row in body.split('<tr data-asset="')[1:]}


# ---------------------------------------------------------------- assets


def test_a_dags_assets_page_shows_what_it_waits_for_and_what_it_consumed(app):
    page = call(app, "/dags/joined/assets")
    assert page.status == 200
    awaited = rows_by_asset(page.text, "awaited")
    assert list(awaited) == ["daily_summary", "nobody_makes_this"]
    summary = awaited["daily_summary"]
    assert 'data-status="waiting for other assets"' in summary
    assert "2026-01-01" in summary and "summarise" in summary
    assert f'href="{run_url("sales", "backfill__2026-01-01T00:00:00+00:00")}"' in summary
    assert 'data-status="no events"' in awaited["nobody_makes_this"]
    assert "No task of this DAG has outlets" in page.text
    consumed = rows_by_asset(call(app, "/dags/report/assets").text, "awaited")
    assert 'data-status="consumed"' in consumed["daily_summary"]


def test_a_new_event_is_new_until_the_scheduler_looks(app, sqlite_store):
    with sqlite_store.write() as conn:
        event = {"b_asset": "daily_summary", "b_partition_key": "2026-01-05", "b_fingerprint": "f"}
        event |= {"b_dag_id": None, "b_run_pk": None, "b_task_id": None}
        sql.execute_many(
            conn, assets.Q.INSERT_ASSET_EVENTS, [event | {"b_created_at": sqlite_store.now(conn)}]
        )
    [waited] = call(app, "/api/dags/report/assets").json()["waits_for"]
    assert (waited["status"], waited["latest_event"]["partition_key"]) == ("new", "2026-01-05")
    assert waited["latest_event"]["run_id"] is None
    assert "<td>-</td>" in call(app, "/dags/report/assets").text  # no producer to link
    look(sqlite_store, "report")
    [waited] = call(app, "/api/dags/report/assets").json()["waits_for"]
    assert waited["status"] == "consumed" and waited["consumed_event_at"]


def test_a_producers_assets_page_shows_its_outlets_with_the_latest_event(app):
    page = call(app, "/dags/sales/assets")
    assert "Not scheduled on assets" in page.text
    produced = rows_by_asset(page.text, "produced")
    assert "summarise" in produced["daily_summary"] and "2026-01-01" in produced["daily_summary"]
    doc = call(app, "/api/dags/sales/assets").json()
    assert doc["waits_for"] == []
    [made] = doc["produces"]
    assert made["tasks"] == ["summarise"]
    assert made["latest_event"]["run_id"] == "backfill__2026-01-01T00:00:00+00:00"
    assert made["latest_event"]["task_id"] == "summarise"


def test_the_assets_page_lists_every_asset_like_the_cli(app):
    page = call(app, "/assets")
    assert page.status == 200 and 'href="/assets"' in page.text
    listed = rows_by_asset(page.text, "assets")
    assert list(listed) == ["daily_summary", "nobody_makes_this"]
    assert 'href="/dags/sales/assets">sales.summarise</a>' in listed["daily_summary"]
    assert 'href="/dags/joined/assets">joined</a>' in listed["daily_summary"]
    assert "no events yet" in listed["nobody_makes_this"]
    doc = call(app, "/api/assets").json()
    assert [(a["name"], a["events"]) for a in doc] == [
        ("daily_summary", 1),
        ("nobody_makes_this", 0),
    ]
    assert doc[0]["producers"] == ["sales.summarise"]
    assert 'href="/dags/sales/assets"' in call(app, "/dags/sales/grid").text


@pytest.mark.parametrize(
    "url", ["/dags/nope/assets", "/api/dags/nope/assets", "/dags/nope/runs/x/callbacks/1/log"]
)
def test_unknown_dags_are_404(app, url):
    assert call(app, url).status == 404


# ---------------------------------------------------------------- callbacks


def finish_callbacks(store: Store, logs: Path) -> None:
    """Run every pending callback as a worker would: each fails, with markup in its reason."""
    with store.write() as conn:
        held = callbacks.claim(conn, OWNER, 10, 60, store.now(conn))
    ends = [
        callbacks.CallbackEnd(c.id, False, f"raised {XSS}", append_log(logs / "cb.log", "cb"))
        for c in held
    ]
    with store.write() as conn:
        callbacks.finish(conn, OWNER, ends, store.now(conn))


def test_the_run_page_lists_its_callbacks_with_state_and_error(app, sqlite_store, tmp_path):
    failed = run_url("sales", "backfill__2026-01-02T00:00:00+00:00")
    pending = call(app, failed).text.split('<h2 id="callbacks">')[1]
    assert 'data-event="task_failure" data-state="pending"' in pending
    assert XSS not in pending and "&lt;script&gt;" in pending
    assert ">log</a>" not in pending  # nothing ran yet, so no log
    finish_callbacks(sqlite_store, tmp_path / "logs")
    done = call(app, failed).text.split('<h2 id="callbacks">')[1]
    assert 'data-state="failed"' in done and XSS not in done
    [entry] = call(app, "/api" + failed).json()["callbacks"]
    assert (entry["event"], entry["state"], entry["task_id"]) == (
        "task_failure",
        "failed",
        "summarise",
    )
    assert (entry["error"], entry["callback_error"]) == (XSS, f"raised {XSS}")
    assert entry["map_index"] == -1 and entry["ended_at"] and entry["created_at"]
    log = call(app, entry["log_url"])
    assert log.status == 200 and "cb\n" in log.text
    assert XSS not in log.text.split("<main>")[1]
    ok = run_url("sales", "backfill__2026-01-01T00:00:00+00:00")
    assert "No callback fired for this run" in call(app, ok).text
    assert call(app, "/api" + ok).json()["callbacks"] == []
    assert call(app, f"{failed}/callbacks/999/log").status == 404


# ---------------------------------------------------------------- conf and audit, escaped


def test_conf_and_audit_details_with_markup_come_out_escaped(app, sqlite_store):
    spec = spec_of(sqlite_store, "sales")
    when = spec.timetable.next_interval(None).start + timedelta(days=30)
    with sqlite_store.write() as conn:
        runs.create_manual_run(
            conn, spec, DataInterval(when, when), "manual-1", sqlite_store.now(conn), {"x": XSS}
        )
        audit.record(sqlite_store, conn, "trigger", "sales", "manual-1", conf={"x": XSS})
    run_page = call(app, run_url("sales", "manual-1")).text.split("<main>")[1]
    assert "<script>" not in run_page and "\\u003cscript\\u003e" in run_page
    audit_page = call(app, "/audit").text.split("<main>")[1]
    assert "<script>" not in audit_page and "\\u003cscript\\u003e" in audit_page
    assert f'href="{run_url("sales", "manual-1")}">manual-1</a>' in audit_page
    assert 'href="/dags/sales/audit">sales</a>' in audit_page


def test_a_condition_dags_assets_page_shows_pending_and_consumed_events(sqlite_store, tmp_path):
    """An Airflow-style condition: an asset with an event after the DAG's last
    asset-triggered run waits for the condition; once a run consumed it, it is consumed."""
    from dagrun.runtime.scheduler import Scheduler

    write_dag(
        tmp_path / "dags",
        "cond.py",
        """
        from dagrun import DAG, Asset, task

        with DAG("cond", schedule=Asset("a") & Asset("b")):
            @task
            def join():
                return 1

            join()
        """,
    )
    sync_dags(sqlite_store, str(tmp_path / "dags"))
    app = WebApp(sqlite_store, logs_root=tmp_path / "logs")

    def add(asset: str) -> None:
        with sqlite_store.write() as conn:
            row = {"b_asset": asset, "b_partition_key": "k", "b_fingerprint": None}
            row |= {"b_dag_id": None, "b_run_pk": None, "b_task_id": None}
            sql.execute(
                conn, assets.Q.INSERT_ASSET_EVENTS, row | {"b_created_at": sqlite_store.now(conn)}
            )

    def statuses() -> dict[str, str]:
        waits = call(app, "/api/dags/cond/assets").json()["waits_for"]
        return {w["name"]: w["status"] for w in waits}

    assert statuses() == {"a": "no events", "b": "no events"}
    add("a")
    assert statuses() == {"a": "waiting for other assets", "b": "no events"}
    add("b")
    Scheduler(sqlite_store, None).tick()
    assert statuses() == {"a": "consumed", "b": "consumed"}
    [shown] = call(app, "/api/dags").json()["dags"]
    assert shown["schedule"] == "assets: a & b"

"""The web page and JSON API, called in-process through WSGI against a store filled by the
real transitions (create, admit, start, claim, complete) and the real DAG sync."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from html.parser import HTMLParser
from io import BytesIO
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from sqlalchemy import update

from dagrun import webapp
from dagrun.parsing.spec import DagSpec
from dagrun.runtime.dag_sync import sync_dags
from dagrun.states import AttemptOutcome, RunType
from dagrun.store import Store, attempts, audit, dag_reads, runs, schema, sql, task_reads, upkeep
from dagrun.store.logfiles import LogRange
from dagrun.store.schema import task_attempt, task_instance
from dagrun.timing.timetable import DataInterval
from dagrun.webapp import WebApp, make_web_server
from tests.helpers import dagrun_cmd, run_cli, wait_until, write_dag

OWNER = "test-worker"
XSS_DESC = "<script>alert('desc')</script>"
XSS_TAG = "<b>tag</b>"
XSS_ERROR = "ValueError: <img src=x onerror=alert('err')>"
XSS_LOG = "<script>alert('log')</script>"
XSS_IMPORT = "<b>broken</b> & bad"
SERVING = re.compile(r"serving (http://\S+/)")
TASKS = ["zeta_extract", "load.v2-x", "alpha_report", "notify"]

SHOP_DAG = f"""
    from dagrun import DAG, task

    with DAG("shop", schedule="@daily", start_date="2026-01-01", timezone="America/New_York",
             description={XSS_DESC!r}, tags=[{XSS_TAG!r}, "sales"], max_active_runs=50):
        @task
        def zeta_extract():
            return 1

        @task(retries=1, task_id="load.v2-x")
        def load():
            return 1

        @task
        def alpha_report():
            return 1

        @task
        def notify():
            return 1

        zeta_extract() >> load() >> alpha_report() >> notify()
    """

IDLE_DAG = """
    from dagrun import DAG, task

    with DAG("idle", schedule=None, is_paused_upon_creation=True):
        @task
        def only():
            return 1

        only()
    """


# ---------------------------------------------------------------- a WSGI test client


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode()

    def json(self):
        assert self.headers["Content-Type"].startswith("application/json"), self.headers
        return json.loads(self.body)


def call(app: WebApp, url: str, method: str = "GET") -> Reply:
    """Call the app as wsgiref would: the path percent-decoded to latin-1, the query raw."""
    parts = urlsplit(url)
    environ = {
        "REQUEST_METHOD": method,
        "PATH_INFO": unquote(parts.path, "latin-1"),
        "QUERY_STRING": parts.query,
        "SERVER_NAME": "localhost",
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "wsgi.input": BytesIO(),
        "wsgi.url_scheme": "http",
    }
    seen: dict = {}

    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        seen["status"], seen["headers"] = int(status.split()[0]), dict(headers)

    body = b"".join(app(environ, start_response))
    return Reply(seen["status"], seen["headers"], body)


class Elements(HTMLParser):
    """Every start tag with its attributes, to count cells and read data attributes."""

    def __init__(self, html: str):
        super().__init__()
        self.found: list[tuple[str, dict[str, str]]] = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        self.found.append((tag, {k: v or "" for k, v in attrs}))

    def select(self, tag: str, cls: str | None = None) -> list[dict[str, str]]:
        return [
            a
            for t, a in self.found
            if t == tag and (cls is None or cls in a.get("class", "").split())
        ]


# ---------------------------------------------------------------- building a store


@dataclass
class World:
    store: Store
    app: WebApp
    logs: Path
    spec: DagSpec
    run_ids: list[str] = field(default_factory=list)


def make_runs(store: Store, spec: DagSpec, days: int, start_runs: bool = True) -> list[str]:
    """Create and admit one backfill run per day from the DAG's start; start them if asked."""
    first = spec.timetable.next_interval(None).start
    intervals = list(spec.timetable.intervals(first, first + timedelta(days=days - 1)))
    now = store.now()
    with store.write() as conn:
        runs.create_runs(conn, spec, intervals, RunType.BACKFILL, now)
        runs.admit_runs(conn, spec, days, now)
        if start_runs:
            runs.start_runs(conn, spec, now)
    return [runs.run_id_for(RunType.BACKFILL, i.start) for i in intervals]


def work_off(
    store: Store, spec: DagSpec, logs: Path, fail: Callable[[attempts.Claim], str | None]
) -> None:
    """Claim and complete every queued task (writing each attempt's log) until none is left."""
    while True:
        with store.write() as conn:
            upkeep.requeue_retries(conn, store.now() + timedelta(hours=1))
            claims = attempts.claim(conn, OWNER, 500, 30, store.now())
        if not claims:
            return
        outcomes = []
        for c in claims:
            log = append_log(logs / "segment.log", f"attempt {c.try_number} of {c.task_id}")
            error = fail(c)
            outcomes.append(
                attempts.Outcome(
                    ti_id=c.ti_id,
                    run_pk=c.run_pk,
                    dag_id=c.dag_id,
                    task_id=c.task_id,
                    fence_token=c.fence_token,
                    outcome=AttemptOutcome.FAILED if error else AttemptOutcome.SUCCESS,
                    error=error,
                    duration=1.5,
                    log=log,
                )
            )
        with store.write() as conn:
            attempts.complete(conn, OWNER, outcomes, lambda _: spec, store.now())


def append_log(path: Path, first_line: str) -> LogRange:
    """Append one attempt's log to a shared segment, as worker children do."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = f"{first_line}\n{XSS_LOG}\n".encode()
    with path.open("ab") as handle:
        offset = handle.tell()
        handle.write(text)
    return LogRange(str(path), offset, len(text))


def shop_failures(c: attempts.Claim) -> str | None:
    """Day 2: load fails once, then succeeds on its retry. Day 3: alpha_report fails for good."""
    day = c.logical_date.day
    if c.task_id == "load.v2-x" and day == 2 and c.try_number == 1:
        return "ConnectionError: blip"
    if c.task_id == "alpha_report" and day == 3:
        return XSS_ERROR
    return None


def build_world(store: Store, tmp_path: Path, days: int = 3) -> World:
    dags = tmp_path / "dags"
    write_dag(dags, "shop.py", SHOP_DAG)
    write_dag(dags, "idle.py", IDLE_DAG)
    write_dag(dags, "broken.py", f"raise RuntimeError({XSS_IMPORT!r})\n")
    sync_dags(store, str(dags))
    with store.read() as conn:
        spec = dag_reads.get_dag(conn, "shop").spec
    logs = tmp_path / "logs"
    run_ids = make_runs(store, spec, days)
    work_off(store, spec, logs, shop_failures)
    return World(store, WebApp(store, logs_root=logs), logs, spec, run_ids)


@pytest.fixture
def world(sqlite_store: Store, tmp_path: Path) -> World:
    return build_world(sqlite_store, tmp_path)


def cells(reply: Reply) -> list[dict[str, str]]:
    return Elements(reply.text).select("td", "cell")


def run_path(world: World, index: int) -> str:
    return webapp.run_url("shop", world.run_ids[index])


# ---------------------------------------------------------------- pages


def test_dag_list_shows_schedule_timezone_paused_next_run_strip_and_error_banner(world):
    reply = call(world.app, "/")
    assert reply.status == 200
    page = reply.text
    for expected in ("shop", "@daily", "America/New_York", "idle"):
        assert expected in page
    assert "1 DAG file failed to load" in page and 'href="/import-errors"' in page
    strip = [a for a in Elements(page).select("a", "sq") if "data-state" in a]
    assert [a["data-state"] for a in strip] == ["success", "success", "failed"]
    assert "no runs yet" in page
    # idle is paused, shop is not: the paused column reads yes for exactly one DAG
    assert page.count("<td>yes</td>") == 1 and page.count("<td>no</td>") == 1
    assert "2026-01-01 00:00 EST" in page  # shop's next run, in its own timezone


def test_import_errors_page_lists_the_file_and_escapes_the_reason(world):
    page = call(world.app, "/import-errors").text
    assert "broken.py" in page
    assert "&lt;b&gt;broken&lt;/b&gt; &amp; bad" in page and "<b>broken</b>" not in page


WARNED_DAG = """
    from airflow import DAG
    from airflow.operators.bash import BashOperator

    with DAG("warned", schedule=None, owner_links={"data": "https://wiki"}):
        BashOperator(task_id="a", bash_command="echo", owner="data")
"""


def test_import_errors_page_lists_each_files_warnings_with_lines(
    sqlite_store: Store, tmp_path: Path
):
    dags = tmp_path / "dags"
    write_dag(dags, "idle.py", IDLE_DAG)
    sync_dags(sqlite_store, str(dags))
    app = WebApp(sqlite_store, logs_root=tmp_path / "logs")
    assert "No DAG file has warnings." in call(app, "/import-errors").text
    assert call(app, "/api/import-warnings").json() == []

    path = write_dag(dags, "warned.py", WARNED_DAG)
    sync_dags(sqlite_store, str(dags))

    page = call(app, "/import-errors").text
    assert "Every DAG file loaded." in page
    section = page[page.index('<h2 id="warnings">') :]
    assert f"<code>{path}</code>" in section
    assert "<code>line 4</code>: owner_links: accepted but not acted on by dagrun" in section
    assert "<code>line 5</code>: owner: accepted but not acted on by dagrun" in section
    assert call(app, "/api/import-warnings").json() == [
        {
            "file": str(path),
            "line": 4,
            "message": "owner_links: accepted but not acted on by dagrun",
        },
        {"file": str(path), "line": 5, "message": "owner: accepted but not acted on by dagrun"},
    ]


def test_grid_rows_are_tasks_in_topological_order_and_cells_carry_state_try_duration(world):
    reply = call(world.app, "/dags/shop/grid")
    assert reply.status == 200
    elements = Elements(reply.text)
    rows = [a for a in elements.select("th", "task")]
    assert len(rows) == len(TASKS)
    assert reply.text.index(">zeta_extract<") < reply.text.index(">load.v2-x<")
    assert reply.text.index(">load.v2-x<") < reply.text.index(">alpha_report<")
    found = cells(reply)
    assert len(found) == len(TASKS) * 3
    by_key = {(c["data-task"], c["data-run"]): c for c in found}
    failed = by_key[("alpha_report", world.run_ids[2])]
    assert failed["data-state"] == "failed" and "s-failed" in failed["class"]
    assert "failed" in failed["title"] and "try 1 of 1" in failed["title"]
    assert "1.50s" in failed["title"]
    retried = by_key[("load.v2-x", world.run_ids[1])]
    assert retried["data-state"] == "success" and "try 2 of 2" in retried["title"]
    assert by_key[("notify", world.run_ids[2])]["data-state"] == "upstream_failed"
    assert 'class="legend"' in reply.text


def test_grid_shows_local_time_with_utc_on_hover(world):
    page = call(world.app, "/dags/shop/grid").text
    # 2026-01-01 00:00 in New York is 05:00 UTC
    assert "2026-01-01 00:00 EST" in page
    assert "2026-01-01 05:00:00 UTC" in page
    assert "times in America/New_York" in page


def test_grid_task_links_and_ids_are_url_escaped(world):
    page = call(world.app, "/dags/shop/grid").text
    encoded = world.run_ids[0].replace(":", "%3A").replace("+", "%2B")
    assert f'href="/dags/shop/runs/{encoded}#task-load.v2-x"' in page
    assert call(world.app, f"/dags/shop/runs/{encoded}").status == 200


def test_a_manual_run_id_with_slashes_spaces_and_unicode_has_working_pages(world):
    run_id = "nightly/re-run 2026 ü<b>"
    first = world.spec.timetable.next_interval(None).start + timedelta(days=10)
    (interval,) = world.spec.timetable.intervals(first, first)
    with world.store.write() as conn:
        runs.create_manual_run(conn, world.spec, interval, run_id, world.store.now())
        runs.admit_runs(conn, world.spec, 10, world.store.now())
        runs.start_runs(conn, world.spec, world.store.now())
    work_off(world.store, world.spec, world.logs, lambda _: None)
    page = call(world.app, webapp.run_url("shop", run_id))
    assert page.status == 200 and "nightly/re-run 2026 ü&lt;b&gt;" in page.text
    assert call(world.app, "/api" + webapp.run_url("shop", run_id)).json()["run_id"] == run_id
    log = call(world.app, webapp.log_url("shop", run_id, "notify", 1))
    assert log.status == 200 and "attempt 1 of notify" in log.text
    assert run_id in [c["data-run"] for c in cells(call(world.app, "/dags/shop/grid"))]


def test_dag_description_and_tags_are_escaped_everywhere(world):
    for url in ("/", "/dags/shop/grid", run_path(world, 0)):
        page = call(world.app, url).text
        assert XSS_DESC not in page and XSS_TAG not in page
        assert "&lt;script&gt;alert(&#39;desc&#39;)&lt;/script&gt;" in page
        assert "&lt;b&gt;tag&lt;/b&gt;" in page


def test_run_page_lists_tasks_states_tries_durations_errors_and_log_links(world):
    reply = call(world.app, run_path(world, 2))
    assert reply.status == 200
    page = reply.text
    states = {row["id"]: row["data-state"] for row in Elements(page).select("tr") if "id" in row}
    assert states == {
        "task-zeta_extract": "success",
        "task-load.v2-x": "success",
        "task-alpha_report": "failed",
        "task-notify": "upstream_failed",
    }
    assert XSS_ERROR not in page
    assert "ValueError: &lt;img src=x onerror=alert(&#39;err&#39;)&gt;" in page
    assert "1 of 1" in page and "1.50s" in page
    log_link = webapp.log_url("shop", world.run_ids[2], "alpha_report", 1)
    assert f'href="{log_link}"' in page


def test_run_page_shows_every_try_of_a_retried_task(world):
    page = call(world.app, run_path(world, 1)).text
    assert "try 1: failed" in page and "try 2: success" in page
    assert "2 of 2" in page


def test_log_page_shows_the_attempt_log_escaped(world):
    reply = call(world.app, webapp.log_url("shop", world.run_ids[1], "load.v2-x", 1))
    assert reply.status == 200
    assert "attempt 1 of load.v2-x" in reply.text
    assert "attempt 2 of load.v2-x" not in reply.text  # the next try's range of the segment
    assert XSS_LOG not in reply.text
    assert "&lt;script&gt;alert(&#39;log&#39;)&lt;/script&gt;" in reply.text
    assert "ConnectionError: blip" in reply.text
    assert "try 2" in reply.text  # a link to the other try


def test_log_tail_is_capped_for_huge_files(world, monkeypatch):
    monkeypatch.setattr(world.app, "site", dataclasses.replace(world.app.site, log_tail_bytes=64))
    big = world.logs / "big.log"
    big.write_text("HEAD-LINE\n" + "x" * 500 + "\nTAIL-LINE\nNEXT-ATTEMPT\n")
    size = big.stat().st_size - len("NEXT-ATTEMPT\n")
    page = call(world.app, _point_log_at(world, str(big), length=size)).text
    assert "TAIL-LINE" in page and "HEAD-LINE" not in page and "NEXT-ATTEMPT" not in page
    assert "earlier bytes" in page


# ---------------------------------------------------------------- paging and refresh


@pytest.fixture
def long_world(sqlite_store: Store, tmp_path: Path) -> World:
    return build_world(sqlite_store, tmp_path, days=30)


def _dates(reply: Reply) -> list[str]:
    return [r["run_id"] for r in reply.json()["runs"]]


def test_grid_pages_through_older_runs_25_by_default(long_world):
    app = long_world.app
    first = call(app, "/api/dags/shop/grid")
    assert _dates(first) == long_world.run_ids[5:]
    page = first.json()["page"]
    assert page["runs"] == 25 and page["has_newer"] is False and page["older_before"]
    older = call(app, f"/api/dags/shop/grid?before={page['older_before']}")
    assert _dates(older) == long_world.run_ids[:5]
    assert older.json()["page"]["older_before"] is None
    assert older.json()["page"]["has_newer"] is True
    assert older.json()["page"]["newer_before"] is None  # the newer page is the latest one
    html = call(app, "/dags/shop/grid").text
    assert len(Elements(html).select("td", "cell")) == 25 * len(TASKS)
    assert 'rel="prev"' in html


def test_grid_page_size_and_cursors_round_trip(long_world):
    app = long_world.app
    ids = long_world.run_ids
    newest = call(app, "/api/dags/shop/grid?runs=10")
    assert _dates(newest) == ids[20:]
    middle = call(
        app, f"/api/dags/shop/grid?runs=10&before={newest.json()['page']['older_before']}"
    )
    assert _dates(middle) == ids[10:20]
    oldest = call(
        app, f"/api/dags/shop/grid?runs=10&before={middle.json()['page']['older_before']}"
    )
    assert _dates(oldest) == ids[:10]
    back = call(app, f"/api/dags/shop/grid?runs=10&before={oldest.json()['page']['newer_before']}")
    assert _dates(back) == ids[10:20]
    html = call(app, f"/dags/shop/grid?runs=10&before={middle.json()['page']['older_before']}")
    assert len(cells(html)) == 10 * len(TASKS) and 'rel="next"' in html.text


def test_grid_before_accepts_an_offset_with_a_decoded_plus(long_world):
    iso = long_world.spec.timetable.next_interval(None).start + timedelta(days=3)
    reply = call(long_world.app, f"/api/dags/shop/grid?before={iso.isoformat()}")
    assert _dates(reply) == long_world.run_ids[:3]


@pytest.mark.parametrize(
    ("query", "status", "runs"),
    [
        ("runs=1000", 200, 30),
        ("runs=0", 200, 1),
        ("runs=abc", 400, None),
        ("before=soon", 400, None),
        ("runs=" + "9" * 5000, 400, None),
        ("runs=%D9%A3", 400, None),  # an Arabic-Indic digit three
        ("before=0001-01-01T00:00:00%2B01:00", 400, None),  # before year 1 in UTC
        ("before=2026-01-02", 200, 1),  # a date alone is midnight UTC
    ],
)
def test_grid_query_parameters_are_validated(long_world, query, status, runs):
    reply = call(long_world.app, f"/api/dags/shop/grid?{query}")
    assert reply.status == status
    if runs is not None:
        assert len(reply.json()["runs"]) == runs
    html = call(long_world.app, f"/dags/shop/grid?{query}")
    assert html.status == status and "Traceback" not in html.text


def test_pages_refresh_while_runs_are_active_unless_told_not_to(sqlite_store, tmp_path):
    world = build_world(sqlite_store, tmp_path)
    refresh = 'data-refresh="5"'
    assert refresh not in call(world.app, "/dags/shop/grid").text
    world.run_ids = make_runs(world.store, world.spec, 5)  # two more, running, tasks queued
    for url in ("/", "/dags/shop/grid", run_path(world, 3)):
        assert refresh in call(world.app, url).text, url
        quiet = call(world.app, url + "?refresh=0").text
        assert refresh not in quiet and "auto-refresh off" in quiet
    assert refresh not in call(world.app, run_path(world, 0)).text  # a finished run


def test_a_run_not_yet_admitted_shows_empty_cells(sqlite_store, tmp_path):
    world = build_world(sqlite_store, tmp_path)
    ids = make_runs(world.store, world.spec, 4, start_runs=False)
    found = cells(call(world.app, "/dags/shop/grid"))
    states = [c["data-state"] for c in found if c["data-run"] == ids[3]]
    assert states == ["none"] * len(TASKS)


def test_tasks_removed_from_the_dag_still_show_in_old_runs(world, tmp_path):
    write_dag(
        tmp_path / "dags",
        "shop.py",
        SHOP_DAG.replace(">> notify()", "").replace(
            "        @task\n        def notify():\n            return 1\n", ""
        ),
    )
    sync_dags(world.store, str(tmp_path / "dags"))
    reply = call(world.app, "/dags/shop/grid")
    assert "(removed)" in reply.text
    assert len(cells(reply)) == len(TASKS) * 3
    api = call(world.app, "/api/dags/shop/grid").json()
    assert [t["task_id"] for t in api["tasks"] if t["removed"]] == ["notify"]


def test_a_dag_whose_file_was_deleted_keeps_its_grid(world, tmp_path):
    (tmp_path / "dags" / "shop.py").unlink()
    sync_dags(world.store, str(tmp_path / "dags"))
    assert "shop" not in [d["dag_id"] for d in call(world.app, "/api/dags").json()["dags"]]
    reply = call(world.app, "/dags/shop/grid")
    assert reply.status == 200 and "no longer defines it" in reply.text


# ---------------------------------------------------------------- the JSON API


def test_api_dags_mirrors_the_list(world):
    document = call(world.app, "/api/dags").json()
    assert document["import_errors"] == 1
    shop, idle = (next(d for d in document["dags"] if d["dag_id"] == n) for n in ("shop", "idle"))
    assert shop["schedule"] == "@daily" and shop["timezone"] == "America/New_York"
    assert shop["paused"] is False and idle["paused"] is True
    assert shop["description"] == XSS_DESC  # JSON carries the raw string; the page escapes it
    assert shop["tasks"] == TASKS
    # Runs exist for Jan 1-3 (the scheduler would skip them): the next one it creates is Jan 4.
    assert shop["next_logical_date"] == "2026-01-04T05:00:00+00:00"
    assert shop["next_due_at"] == "2026-01-05T05:00:00+00:00"  # due when its day has ended
    assert shop["local_next_due_at"] == "2026-01-05T00:00:00-05:00"
    assert [r["state"] for r in shop["recent_runs"]] == ["success", "success", "failed"]
    assert idle["recent_runs"] == []


def test_next_run_agrees_with_dags_list_including_catchup_false(cli_env, dags_dir):
    write_dag(dags_dir, "shop.py", SHOP_DAG)
    write_dag(
        dags_dir,
        "nocatch.py",
        """
        from dagrun import DAG, task

        with DAG("nocatch", schedule="@daily", start_date="2020-01-01", catchup=False):
            @task
            def tick():
                return 1

            tick()
        """,
    )
    listed = run_cli("dags", "list", "--json", env=cli_env)
    assert listed.returncode == 0, listed.stderr
    expected = {d["dag_id"]: d["next_logical_date"] for d in json.loads(listed.stdout)}
    store = Store(cli_env["DAGRUN_DB_URL"])
    try:
        found = call(WebApp(store), "/api/dags").json()["dags"]
    finally:
        store.dispose()
    as_utc = {d["dag_id"]: d["next_logical_date"] for d in found}
    assert as_utc == expected
    assert not expected["nocatch"].startswith("2020-01-01")  # the latest complete day


def test_api_import_errors(world):
    (error,) = call(world.app, "/api/import-errors").json()
    assert error["file"].endswith("broken.py") and XSS_IMPORT in error["error"]


def test_api_grid_mirrors_the_page(world):
    document = call(world.app, "/api/dags/shop/grid").json()
    assert [t["task_id"] for t in document["tasks"]] == TASKS
    assert [r["run_id"] for r in document["runs"]] == world.run_ids
    from_api = {
        (t["task_id"], c["run_id"]): c["state"] for t in document["tasks"] for c in t["cells"]
    }
    from_page = {
        (c["data-task"], c["data-run"]): c["data-state"]
        for c in cells(call(world.app, "/dags/shop/grid"))
    }
    assert from_api == from_page
    report = document["tasks"][2]["cells"][2]
    assert report == {
        "run_id": world.run_ids[2],
        "state": "failed",
        "try_number": 1,
        "max_tries": 1,
        "duration": 1.5,
    }


def test_api_runs_lists_runs_oldest_first_with_state_filter(world):
    document = call(world.app, "/api/dags/shop/runs").json()
    assert [r["run_id"] for r in document["runs"]] == world.run_ids
    assert [r["state"] for r in document["runs"]] == ["success", "success", "failed"]
    assert document["runs"][0]["logical_date"] == "2026-01-01T05:00:00+00:00"
    assert document["runs"][0]["local_logical_date"] == "2026-01-01T00:00:00-05:00"
    failed = call(world.app, "/api/dags/shop/runs?state=failed").json()["runs"]
    assert [r["run_id"] for r in failed] == world.run_ids[2:]
    paged = call(world.app, "/api/dags/shop/runs?runs=2").json()
    assert [r["run_id"] for r in paged["runs"]] == world.run_ids[1:]
    assert paged["older_before"] == "2026-01-02T05:00:00+00:00"


def test_run_page_and_api_show_the_runs_conf_escaped(world):
    first = world.spec.timetable.next_interval(None).start + timedelta(days=20)
    conf = {"region": "<EU>", "n": 3}
    with world.store.write() as conn:
        runs.create_manual_run(
            conn, world.spec, DataInterval(first, first), "k", world.store.now(), conf
        )
    page = call(world.app, webapp.run_url("shop", "k"))
    assert page.status == 200 and '"region": "\\u003cEU\\u003e"' in page.text
    assert call(world.app, "/api" + webapp.run_url("shop", "k")).json()["conf"] == conf
    scheduled = call(world.app, f"/api{run_path(world, 1)}").json()
    assert scheduled["conf"] == {}
    assert "<th>conf</th>" not in call(world.app, run_path(world, 1)).text


def test_audit_pages_list_operator_actions_newest_first_per_dag(world):
    with world.store.write() as conn:
        audit.record(world.store, conn, "trigger", "shop", "k", conf={"x": "<b>"})
        audit.record(world.store, conn, "pause", "elsewhere")
        audit.record(world.store, conn, "cancel", "shop", "k", stopped=1)
    every = call(world.app, "/api/audit").json()
    assert [e["action"] for e in every][:3] == ["cancel", "pause", "trigger"]
    mine = call(world.app, "/api/dags/shop/audit?limit=1").json()
    assert [(e["action"], e["run_id"]) for e in mine] == [("cancel", "k")]
    page = call(world.app, "/dags/shop/audit")
    assert page.status == 200 and "elsewhere" not in page.text
    main = page.text.split("<main>")[1]
    assert '"x": "\\u003cb\\u003e"' in main and "<b>" not in main
    assert call(world.app, "/audit").status == 200
    assert call(world.app, "/dags/nope/audit").status == 404
    assert 'href="/dags/shop/audit"' in call(world.app, "/dags/shop/grid").text


def test_api_run_has_task_instances_and_attempts(world):
    document = call(world.app, f"/api{run_path(world, 1)}").json()
    assert document["run_id"] == world.run_ids[1] and document["state"] == "success"
    tasks = {t["task_id"]: t for t in document["tasks"]}
    assert list(tasks) == TASKS
    load = tasks["load.v2-x"]
    assert (load["state"], load["try_number"], load["max_tries"]) == ("success", 2, 2)
    assert [a["outcome"] for a in load["attempts"]] == ["failed", "success"]
    assert call(world.app, load["attempts"][0]["log_url"]).status == 200
    failed = call(world.app, f"/api{run_path(world, 2)}").json()
    assert {t["task_id"]: t["error"] for t in failed["tasks"]}["alpha_report"] == XSS_ERROR


def test_healthz_checks_the_database(world):
    reply = call(world.app, "/healthz")
    assert reply.status == 200
    version = schema.SCHEMA_VERSION
    assert reply.json() == {"status": "ok", "database": "sqlite", "schema_version": version}
    with world.store.write() as conn:
        conn.exec_driver_sql("DROP TABLE dagrun_meta")
    broken = call(world.app, "/healthz")
    assert broken.status == 503 and broken.json()["status"] == "error"


# ---------------------------------------------------------------- metrics (both engines)


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} missing from:\n{text}")


def _start_day(store: Store, spec: DagSpec, day: int, at) -> None:
    """Create, admit and start the run of one more day, as if the scheduler did it at ``at``."""
    first = spec.timetable.next_interval(None).start + timedelta(days=day)
    with store.write() as conn:
        runs.create_runs(
            conn, spec, [*spec.timetable.intervals(first, first)], RunType.BACKFILL, at
        )
        runs.admit_runs(conn, spec, 10, at)
        runs.start_runs(conn, spec, at)


def test_metrics_in_prometheus_text_format(store, tmp_path):
    world = build_world(store, tmp_path)
    spec, now = world.spec, store.now()
    _start_day(store, spec, 3, now - timedelta(seconds=60))
    with store.write() as conn:  # a lease of 1 s taken a minute ago: expired
        claimed = attempts.claim(conn, OWNER, 5, 1, now - timedelta(seconds=60))
    assert len(claimed) == 1
    _start_day(store, spec, 4, now)
    with store.write() as conn:
        (held,) = attempts.claim(conn, OWNER, 5, 30, now)
    late = attempts.Outcome(
        held.ti_id, held.run_pk, "shop", held.task_id, held.fence_token, AttemptOutcome.SUCCESS
    )
    with store.write() as conn:  # completed by a worker that does not hold the lease: stale
        attempts.complete(conn, "someone-else", [late], lambda _: spec, now)
    _start_day(store, spec, 5, now - timedelta(seconds=120))  # its root queued 2 minutes ago
    reply = call(world.app, "/metrics")
    assert reply.status == 200 and reply.headers["Content-Type"].startswith("text/plain")
    text = reply.text
    assert "# TYPE dagrun_runs gauge" in text
    assert _metric(text, 'dagrun_runs{state="success"}') == 2
    assert _metric(text, 'dagrun_runs{state="failed"}') == 1
    assert _metric(text, 'dagrun_runs{state="running"}') == 3
    assert _metric(text, 'dagrun_runs{state="waiting"}') == 0
    assert _metric(text, 'dagrun_task_instances{state="upstream_failed"}') == 1
    assert _metric(text, 'dagrun_task_instances{state="running"}') == 2
    assert _metric(text, "dagrun_queued_tasks") == 1
    assert _metric(text, 'dagrun_task_instances{state="queued"}') == 1
    assert 119 <= _metric(text, "dagrun_oldest_queued_task_age_seconds") < 3600
    assert _metric(text, "dagrun_expired_leases") == 1
    assert _metric(text, "dagrun_stale_completions_total") == 1


# ---------------------------------------------------------------- both engines: the pages


def test_pages_and_api_on_both_engines(store, tmp_path):
    world = build_world(store, tmp_path)
    for url in (
        "/",
        "/import-errors",
        "/dags/shop/grid",
        run_path(world, 2),
        "/api/dags",
        "/api/dags/shop/grid",
        "/api/dags/shop/runs",
        f"/api{run_path(world, 2)}",
        webapp.log_url("shop", world.run_ids[2], "alpha_report", 1),
        "/healthz",
    ):
        assert call(world.app, url).status == 200, url
    assert len(cells(call(world.app, "/dags/shop/grid"))) == len(TASKS) * 3


def test_the_grid_costs_the_same_few_queries_for_3_runs_or_30(sqlite_store, tmp_path):
    """Batched: one query for the page of runs and one for their cells, never one per cell."""
    world = build_world(sqlite_store, tmp_path, days=30)
    statements: list[str] = []
    counts: dict[int, int] = {}
    for size in (3, 30):
        statements.clear()
        with sql.observed(lambda statement, *_: statements.append(statement)):
            reply = call(world.app, f"/dags/shop/grid?runs={size}")
        assert len(cells(reply)) == size * len(TASKS)
        counts[size] = len([s for s in statements if s.lstrip().upper().startswith("SELECT")])
    assert counts[3] == counts[30] <= 6, counts


def test_every_grid_query_searches_an_index(sqlite_store, tmp_path):
    """On SQLite each statement behind a grid page is an index SEARCH, never a table SCAN."""
    world = build_world(sqlite_store, tmp_path, days=5)
    seen: list[tuple[str, tuple]] = []

    def record(statement, parameters, _seconds) -> None:
        seen.append((statement, tuple(parameters)))

    with sql.observed(record):
        reply = call(world.app, "/dags/shop/grid?runs=2&before=2026-01-04T05:00:00%2B00:00")
    assert reply.status == 200
    selects = [(s, p) for s, p in seen if s.lstrip().upper().startswith("SELECT")]
    assert len(selects) >= 4
    with sqlite_store.engine.connect() as conn:
        for statement, parameters in selects:
            plan = [
                row[-1]
                for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters)
            ]
            # A scalar subquery's line only heads the SEARCH that follows it.
            steps = [step for step in plan if not step.startswith("SCALAR SUBQUERY")]
            assert all(step.startswith("SEARCH") for step in steps), (statement, plan)


# ---------------------------------------------------------------- safety


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
@pytest.mark.parametrize("url", ["/", "/dags/shop/grid", "/api/dags", "/healthz", "/nowhere"])
def test_only_get_and_head_are_allowed(world, method, url):
    reply = call(world.app, url, method)
    assert reply.status == 405
    assert reply.headers["Allow"] == "GET, HEAD"


def test_head_answers_headers_without_a_body(world):
    get, head = call(world.app, "/dags/shop/grid"), call(world.app, "/dags/shop/grid", "HEAD")
    assert head.status == 200 and head.body == b""
    assert head.headers["Content-Length"] == str(len(get.body))


def test_security_headers_allow_only_our_own_script_and_forbid_sniffing(world):
    headers = call(world.app, "/dags/shop/grid").headers
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert "default-src 'none'" in headers["Content-Security-Policy"]
    assert "script-src 'self';" in headers["Content-Security-Policy"]
    assert "unsafe-inline" not in headers["Content-Security-Policy"]
    assert headers["Cache-Control"] == "no-store"


@pytest.mark.parametrize(
    "url",
    [
        "/nowhere",
        "/dags/nope/grid",
        "/dags/shop/runs/no-such-run",
        "/api/dags/nope/grid",
        "/api/dags/nope/runs",
        "/api/dags/shop/runs/no-such-run",
        "/static/nothing.css",
    ],
)
def test_unknown_things_are_404_pages_without_tracebacks(world, url):
    reply = call(world.app, url)
    assert reply.status == 404
    assert "Traceback" not in reply.text
    if url.startswith("/api/"):
        assert reply.json()["status"] == 404
    else:
        assert "404 Not Found" in reply.text


def test_unknown_task_and_try_on_the_log_route_are_404(world):
    run_id = world.run_ids[0]
    assert call(world.app, webapp.log_url("shop", run_id, "ghost", 1)).status == 404
    missing_try = call(world.app, webapp.log_url("shop", run_id, "notify", 7))
    assert missing_try.status == 404 and "has no try 7" in missing_try.text


def _secret(tmp_path: Path) -> Path:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-CONTENT")
    return secret


@pytest.mark.parametrize(
    ("tail", "status"),
    [
        ("tasks/../../../../secret.txt/tries/1/log", 404),
        ("tasks/..%2F..%2F..%2Fsecret.txt/tries/1/log", 404),
        ("tasks/%2e%2e/tries/1/log", 404),
        ("tasks/notify/tries/..%2F1/log", 404),
        ("tasks/notify/tries/1/log/../../../../../../secret.txt", 404),
        ("tasks/notify/tries/99999999999999999999/log", 404),
        ("tasks/notify/tries/1/log?path=../../secret.txt", 200),  # the query names nothing
    ],
)
def test_log_urls_cannot_name_a_path(world, tmp_path, tail, status):
    _secret(tmp_path)
    reply = call(world.app, f"{run_path(world, 0)}/{tail}")
    assert reply.status == status
    assert "TOP-SECRET-CONTENT" not in reply.text


def _point_log_at(world: World, target: str, length: int | None = None) -> str:
    """Tamper with the stored log of notify's first try (as a bad actor with DB access)."""
    with world.store.write() as conn:
        conn.execute(
            update(task_attempt)
            .where(task_attempt.c.task_id == "notify", task_attempt.c.try_number == 1)
            .values(log_path=target, log_offset=0, log_length=length)
        )
    return webapp.log_url("shop", world.run_ids[0], "notify", 1)


def test_a_recorded_log_path_outside_the_logs_folder_is_refused(world, tmp_path):
    secret = _secret(tmp_path)
    for target in (str(secret), str(world.logs / ".." / "secret.txt"), "/etc/passwd"):
        reply = call(world.app, _point_log_at(world, target))
        assert reply.status == 403, target
        assert "TOP-SECRET-CONTENT" not in reply.text and "root:" not in reply.text


def test_a_symlink_inside_the_logs_folder_cannot_escape_it(world, tmp_path):
    secret = _secret(tmp_path)
    link = world.logs / "link.log"
    link.symlink_to(secret)
    reply = call(world.app, _point_log_at(world, str(link)))
    assert reply.status == 403 and "TOP-SECRET-CONTENT" not in reply.text


def test_a_missing_log_file_is_404(world):
    reply = call(world.app, _point_log_at(world, str(world.logs / "gone.log")))
    assert reply.status == 404 and "not on this host" in reply.text


def test_static_files_are_served_by_name_only(world):
    css = call(world.app, "/static/dagrun.css")
    assert css.status == 200 and css.headers["Content-Type"].startswith("text/css")
    assert ".s-failed" in css.text
    for url in ("/static/../webapp.py", "/static/%2e%2e%2fwebapp.py", "/static/templates"):
        assert call(world.app, url).status == 404


def test_an_unexpected_error_is_a_500_page_without_details(world, monkeypatch):
    def explode(*args, **kwargs):
        raise RuntimeError("internal detail /very/secret/path")

    monkeypatch.setattr(task_reads, "grid_page", explode)
    for url in ("/dags/shop/grid", "/api/dags/shop/grid"):
        reply = call(world.app, url)
        assert reply.status == 500
        assert "secret" not in reply.text and "Traceback" not in reply.text


# ---------------------------------------------------------------- living next to writers


def test_pages_read_while_a_writer_holds_the_database(world):
    """SQLite WAL: a write transaction in progress never blocks the page, nor the reverse."""
    with world.store.write() as conn:
        conn.execute(update(task_instance).values(priority_weight=task_instance.c.priority_weight))
        started = time.monotonic()
        assert call(world.app, "/dags/shop/grid").status == 200
        assert call(world.app, "/metrics").status == 200
        assert time.monotonic() - started < 5


def test_the_threaded_server_answers_concurrent_requests(world):
    server = make_web_server(world.app, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with ThreadPoolExecutor(8) as pool:
            statuses = list(pool.map(lambda _: _fetch(base + "/dags/shop/grid"), range(40)))
        assert statuses == [200] * 40
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
    assert not thread.is_alive()


def _fetch(url: str) -> int:
    with urllib.request.urlopen(url, timeout=10) as response:
        response.read()
        return response.status


def test_cli_web_command_help(cli_env):
    result = run_cli("web", "--help", env=cli_env)
    assert result.returncode == 0
    assert "--host" in result.stdout and "127.0.0.1" in result.stdout
    assert "--port" in result.stdout and "8080" in result.stdout


def test_dagrun_web_serves_the_store_and_stops_cleanly_on_sigterm(cli_env, dags_dir):
    write_dag(dags_dir, "idle.py", IDLE_DAG)
    assert run_cli("dags", "list", env=cli_env).returncode == 0  # records the DAG
    process = subprocess.Popen(
        dagrun_cmd("web", "--port", "0"),
        env={**os.environ, **cli_env},
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []

    def read_stderr() -> None:
        for line in process.stderr:
            lines.append(line)

    threading.Thread(target=read_stderr, daemon=True).start()
    try:
        base = wait_until(
            lambda: next((m.group(1) for m in map(SERVING.search, lines) if m), None),
            what="dagrun web to print its address",
        )
        assert base.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(f"{base}api/dags", timeout=10) as response:
            assert [d["dag_id"] for d in json.load(response)["dags"]] == ["idle"]
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)


def test_empty_store_shows_a_hint(sqlite_store, tmp_path):
    app = WebApp(sqlite_store, logs_root=tmp_path / "logs")
    page = call(app, "/").text
    assert "No DAGs in the store yet" in page
    assert call(app, "/api/dags").json() == {"dags": [], "import_errors": 0}


def test_the_grid_benchmark_runs_and_writes_its_json(tmp_path):
    from bench import web_grid

    out = tmp_path / "web_grid.json"
    document = web_grid.main(["--tiny", "--runs", "120", "--repeat", "1", "--out", str(out)])
    assert json.loads(out.read_text()) == document
    assert document["cells_per_page"] == 50 * 30
    assert document["selects_per_grid_request"] <= 7  # 6, and the scheduler banner's
    assert all(r["median_ms"] > 0 for r in document["results"].values())

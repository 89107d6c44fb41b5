"""The grid's shapes: task groups as foldable row groups, a mapped task as one summary row that
expands into its indexes, a branch's skipped path and a sensor waiting in up_for_reschedule;
each through ``?fold=`` and ``?expand=`` without JavaScript, and mirrored by the JSON API.

The store is filled by a real run (attempts in worker children) and the real sensor
transitions; the pages are called in-process through WSGI.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from dagrun.store import Store, sql
from dagrun.webapp import WebApp
from dagrun.webapp.grid import GridShape
from tests.helpers import run_once, write_dag
from tests.runtime.test_sensors import first_poke, watch_spec
from tests.webapp.test_webapp import Elements, call

SHAPES_DAG = """
from dagrun import DAG, TaskGroup, task

with DAG("shapes", schedule=None):
    @task
    def make():
        return [1, 2, 3]

    @task
    def add(x):
        if x == 2:
            raise ValueError("two <is> bad")
        return x

    with TaskGroup("prep"):
        @task
        def clean():
            return 1

        cleaned = clean()
        with TaskGroup("inner"):
            @task
            def check():
                return 1

            cleaned >> check()

    @task.branch
    def pick():
        return "left"

    @task
    def left():
        return "left"

    @task
    def right():
        return "right"

    add.expand(x=make())
    pick() >> [left(), right()]
"""


@dataclass
class Shapes:
    store: Store
    app: WebApp
    run_id: str
    watch_run: str


def build_shapes(store: Store, dags_dir: Path, refresh_seconds: int = 5) -> Shapes:
    """A run of ``shapes`` (index 1 of ``add`` fails, ``right`` is skipped by the branch) and a
    ``watch`` run whose sensor poked once and waits (up_for_reschedule, so the run is active)."""
    write_dag(dags_dir, "shapes.py", SHAPES_DAG)
    run, _ = run_once(store, dags_dir, "shapes")
    first_poke(store, watch_spec())
    with store.read() as conn:
        (watch_run,) = conn.exec_driver_sql(
            "SELECT run_id FROM dag_run WHERE dag_id = 'watch'"
        ).scalars()
    app = WebApp(store, logs_root=dags_dir.parent / "logs", refresh_seconds=refresh_seconds)
    return Shapes(store, app, run.run_id, watch_run)


@pytest.fixture
def shapes(sqlite_store: Store, dags_dir: Path) -> Shapes:
    return build_shapes(sqlite_store, dags_dir)


def body_rows(html: str) -> list[dict]:
    """Each row of the grid's body: its kind, whether it is hidden, its cells' attributes."""
    found: list[dict] = []
    for tag, attrs in Elements(html).found:
        if tag == "tr" and "class" in attrs:  # the head's row has no class
            found.append({"kind": attrs["class"], "hidden": "hidden" in attrs, "cells": []})
        elif tag == "td" and found:
            found[-1]["cells"].append(attrs)
    return found


def labels(html: str) -> list[tuple[str, str, bool]]:
    """(kind, task id or group path, hidden) of each body row; an index row as ``task[i]``."""
    out = []
    for row in body_rows(html):
        first = row["cells"][0]
        name = first.get("data-group") or first["data-task"]
        if "data-map-index" in first:
            name += f"[{first['data-map-index']}]"
        out.append((row["kind"], name, row["hidden"]))
    return out


# ---------------------------------------------------------------- the page


def test_rows_follow_the_groups_with_a_mapped_row_a_skipped_branch(shapes):
    html = call(shapes.app, "/dags/shapes/grid?refresh=0").text
    assert labels(html) == [
        ("group", "prep", False),
        ("task", "prep.clean", False),
        ("group", "prep.inner", False),
        ("task", "prep.inner.check", False),
        ("task", "make", False),
        ("mapped", "add", False),
        ("task", "pick", False),
        ("task", "left", False),
        ("task", "right", False),
    ]
    by_task = {a.get("data-task"): a for a in Elements(html).select("td", "cell")}
    assert by_task["right"]["data-state"] == "skipped"
    assert by_task["left"]["data-state"] == "success"
    mapped = by_task["add"]
    assert mapped["data-state"] == "failed" and "mapped" in mapped["class"]
    assert mapped["data-summary"] == "2 success / 1 failed"
    assert "2 success / 1 failed" in mapped["title"] and "try 1 of 1" in mapped["title"]
    assert '#task-add-0"' in html, "a mapped task's summary links to its first index"
    groups = {a["data-group"]: a for a in Elements(html).select("td", "cell") if "data-group" in a}
    assert groups["prep"]["data-state"] == "success"
    assert groups["prep"]["data-summary"] == "2 success"
    assert groups["prep.inner"]["data-summary"] == "1 success"
    assert "group prep · success" in groups["prep"]["title"]


def test_a_cells_title_holds_task_dates_state_try_and_duration(shapes):
    html = call(shapes.app, "/dags/shapes/grid").text
    cell = next(a for a in Elements(html).select("td", "cell") if a.get("data-task") == "left")
    lines = cell["title"].split("\n")
    assert lines[0] == "left · success"
    assert lines[1].startswith("try 1 of 1 · ") and lines[1].endswith("s")
    assert lines[2].endswith(" UTC)") and " (" in lines[2]  # local time, then UTC


def test_the_sensor_waiting_for_its_next_poke_shows_up_for_reschedule(shapes):
    html = call(shapes.app, "/dags/watch/grid").text
    (landed,) = [a for a in Elements(html).select("td", "cell") if a["data-task"] == "landed"]
    assert landed["data-state"] == "up_for_reschedule" and "s-up_for_reschedule" in landed["class"]
    assert landed["title"].startswith("landed · up_for_reschedule\n")
    legend = html[html.index('class="legend"') :]
    for state in ("up_for_reschedule", "skipped", "upstream_failed"):
        assert f'<span class="sq s-{state}"></span>{state}' in legend


def test_fold_hides_a_groups_rows_and_the_toggle_keeps_other_parameters(shapes):
    html = call(shapes.app, "/dags/shapes/grid?refresh=0&fold=prep.inner").text
    hidden = {key for _, key, is_hidden in labels(html) if is_hidden}
    assert hidden == {"prep.inner.check"}
    html = call(shapes.app, "/dags/shapes/grid?refresh=0&fold=prep").text
    assert {key for _, key, is_hidden in labels(html) if is_hidden} == {
        "prep.clean",
        "prep.inner",
        "prep.inner.check",
    }
    toggles = {a["data-fold"]: a for a in Elements(html).select("a", "fold")}
    assert toggles["prep"]["aria-expanded"] == "false"
    assert toggles["prep"]["href"] == "/dags/shapes/grid?refresh=0"
    assert toggles["prep.inner"]["href"] == "/dags/shapes/grid?refresh=0&fold=prep%2Cprep.inner"


def test_expand_shows_a_row_per_index_linking_to_the_run_page(shapes):
    plain = call(shapes.app, "/dags/shapes/grid").text
    (toggle,) = Elements(plain).select("a", "expand")
    assert toggle["href"] == "/dags/shapes/grid?expand=add"
    assert toggle["aria-expanded"] == "false"
    html = call(shapes.app, toggle["href"]).text
    assert [key for kind, key, _ in labels(html) if kind in ("mapped", "index")] == [
        "add",
        "add[0]",
        "add[1]",
        "add[2]",
    ]
    index = [a for a in Elements(html).select("td", "cell") if a.get("data-map-index")]
    assert [a["data-state"] for a in index] == ["success", "failed", "success"]
    assert index[1]["title"].startswith("add [1] · failed\ntry 1 of 1")
    run_page = f"/dags/shapes/runs/{shapes.run_id}"
    links = [a["href"] for a in Elements(html).select("a") if "#task-add-" in a.get("href", "")]
    assert [link.rpartition("#")[2] for link in links] == [
        "task-add-0",  # the summary
        "task-add-0",
        "task-add-1",
        "task-add-2",
    ]
    assert all(link.startswith(run_page) for link in links)
    (toggle,) = Elements(html).select("a", "expand")
    assert toggle["aria-expanded"] == "true" and toggle["href"] == "/dags/shapes/grid"


def test_expanding_costs_no_extra_statement(shapes):
    """The cells statement already returns every index: expanding reads nothing more."""
    statements: list[str] = []
    counts = []
    for url in ("/dags/shapes/grid", "/dags/shapes/grid?expand=add&fold=prep"):
        statements.clear()
        with sql.observed(lambda statement, *_: statements.append(statement)):
            assert call(shapes.app, url).status == 200
        counts.append(len(statements))
    assert counts[0] == counts[1]


def test_names_from_the_query_come_back_only_percent_encoded(shapes):
    html = call(shapes.app, '/dags/shapes/grid?fold=%3Cb%3E"&expand=%3Cscript%3E').text
    assert "<b>" not in html and "<script>" not in html and '"&' not in html
    (toggle,) = Elements(html).select("a", "expand")
    assert toggle["href"] == "/dags/shapes/grid?fold=%3Cb%3E%22&expand=%3Cscript%3E%2Cadd"


# ---------------------------------------------------------------- refresh, CSP, the API


def test_refresh_is_a_data_attribute_read_by_the_one_script(shapes):
    active = call(shapes.app, "/dags/watch/grid").text
    assert 'data-refresh="5"' in active and "http-equiv" not in active
    assert '<script src="/static/dagrun.js?v=' in active
    assert "<script>" not in active and " style=" not in active
    quiet = call(shapes.app, "/dags/watch/grid?refresh=0").text
    assert 'data-refresh="0"' in quiet and "auto-refresh off" in quiet
    script = call(shapes.app, "/static/dagrun.js")
    assert script.status == 200 and script.headers["Content-Type"] == "text/javascript"
    assert b"visibilityState" in script.body


def test_the_csp_allows_our_own_script_and_nothing_inline(shapes):
    policy = call(shapes.app, "/dags/shapes/grid").headers["Content-Security-Policy"]
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
    assert directives["script-src"] == "'self'"
    assert directives["default-src"] == "'none'" and directives["style-src"] == "'self'"
    assert "unsafe" not in policy


def test_api_grid_has_groups_and_the_counts_of_mapped_tasks(shapes):
    document = call(shapes.app, "/api/dags/shapes/grid").json()
    tasks = {t["task_id"]: t for t in document["tasks"]}
    assert tasks["add"]["mapped"] and tasks["add"]["group"] is None
    assert tasks["add"]["cells"][0]["counts"] == {"success": 2, "failed": 1}
    assert "indexes" not in tasks["add"]
    assert tasks["prep.inner.check"]["group"] == "prep.inner"
    assert "counts" not in tasks["left"]["cells"][0]
    groups = {g["group"]: g for g in document["groups"]}
    assert groups["prep.inner"]["parent"] == "prep" and groups["prep"]["parent"] is None
    assert groups["prep"]["cells"][0] == {
        "run_id": shapes.run_id,
        "state": "success",
        "counts": {"success": 2},
    }
    expanded = call(shapes.app, "/api/dags/shapes/grid?expand=add").json()
    (add,) = [t for t in expanded["tasks"] if t["task_id"] == "add"]
    assert [(i["map_index"], i["cells"][0]["state"]) for i in add["indexes"]] == [
        (0, "success"),
        (1, "failed"),
        (2, "success"),
    ]


# ---------------------------------------------------------------- the shape, pure


def test_the_shape_toggles_names_and_folds_nested_groups():
    shape = GridShape.from_query({"fold": "a,,b.c", "expand": "t"})
    assert shape.fold == {"a", "b.c"} and shape.expand == {"t"}
    assert shape.fold_param("a") == "b.c" and shape.fold_param("z") == "a,b.c,z"
    assert shape.expand_param("t") is None and shape.expand_param("u") == "t,u"
    assert shape.hides("a") and shape.hides("a.x") and shape.hides("b.c.d")
    assert not shape.hides("b") and not shape.hides("") and not shape.hides("ab")

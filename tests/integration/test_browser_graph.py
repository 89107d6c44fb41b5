"""The Graph view in a real browser: headless Chromium renders the SVG of a run a backfill
produced, with a task group, a mapped task and a failure.

As in ``test_browser.py``: the page is served by the threaded server ``dagrun web`` uses; a
probe page on the same origin loads the graph in an iframe and writes what the browser
computed (boxes, edges, each state's fill) into its own DOM, which ``--dump-dom`` prints; a
second run saves a screenshot, ``graph.png``.
"""

from __future__ import annotations

import html
from collections.abc import Iterator

import pytest

from dagrun.store import run_reads
from dagrun.webapp.urls import graph_url
from tests.integration import browser

pytestmark = pytest.mark.slow

SHAPES_DAG = """
    from dagrun import DAG, TaskGroup, task

    with DAG("shapes", schedule="@daily", start_date="2026-01-01", timezone="UTC"):
        @task
        def extract(ds):
            return ds

        @task
        def clean(value):
            return value

        @task
        def check(value):
            raise ValueError(f"bad rows in {value}")

        @task
        def double(n):
            return 2 * n

        @task
        def publish(*values):
            return len(values)

        e = extract()
        with TaskGroup("quality"):
            k = check(clean(e))
        d = double.expand(n=[1, 2, 3])
        e >> d
        publish(k, d)
    """
STATES = {
    "extract": "success",
    "quality.clean": "success",
    "quality.check": "failed",
    "double": "success",
    "publish": "upstream_failed",
}
EDGES = 5

PROBE = """<!doctype html>
<html><body>
<iframe id="graph" src="__SRC__" width="1200" height="700"></iframe>
<pre id="result">pending</pre>
<script>
document.getElementById("graph").addEventListener("load", function () {
  var doc = this.contentDocument;
  var boxes = doc.querySelectorAll("svg.graph g.task");
  var out = {
    boxes: boxes.length,
    edges: doc.querySelectorAll("svg.graph path.edge").length,
    groups: doc.querySelectorAll("svg.graph rect.group").length,
    states: {}, fills: {}, drawn: 0
  };
  boxes.forEach(function (g) {
    var rect = g.querySelector("rect.task"), box = rect.getBBox();
    out.states[g.dataset.task] = g.dataset.state;
    out.fills[g.dataset.state] = getComputedStyle(rect).fill;
    if (box.width > 0 && box.height > 0) out.drawn += 1;
  });
  document.getElementById("result").textContent = JSON.stringify(out);
});
</script>
</body></html>
"""


@pytest.fixture
def served(cli_env, dags_dir) -> Iterator[tuple[str, str]]:
    """Backfill one day of the shapes DAG through the CLI (quality.check fails), then serve
    the store on a free loopback port; yields the base URL and the graph of the run."""
    browser.require_chromium()
    backfill = browser.backfilled(
        cli_env, dags_dir, "shapes", SHAPES_DAG, "2026-01-01", "2026-01-01"
    )
    with backfill as (store, app):
        with store.read() as conn:
            (run,) = run_reads.runs(conn, "shapes")
        graph = graph_url("shapes", run.run_id)
        probe = PROBE.replace("__SRC__", html.escape(graph))
        with browser.serving(browser.with_probe(app, probe)) as base:
            yield base, graph


def test_the_graph_in_headless_chromium(served, tmp_path):
    base, _ = served
    probe, _ = browser.read_probe(tmp_path, f"{base}/__probe")
    assert probe["boxes"] == probe["drawn"] == len(STATES)
    assert probe["edges"] == EDGES
    assert probe["groups"] == 1
    assert probe["states"] == STATES
    css = browser.stylesheet(base)
    assert probe["fills"]["failed"] == browser.css_colour(css, "failed")
    assert probe["fills"]["success"] == browser.css_colour(css, "success")
    assert probe["fills"]["failed"] != probe["fills"]["success"]


def test_a_screenshot_of_the_graph(served, tmp_path):
    base, graph = served
    browser.check_screenshot(tmp_path, "graph.png", f"{base}{graph}")

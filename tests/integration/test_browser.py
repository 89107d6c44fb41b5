"""The run grid in a real browser: headless Chromium renders the page a backfill produced.

The page is served by the same threaded server ``dagrun web`` uses, on a free loopback port.
A probe page on the same origin loads the grid in an iframe and writes what the browser
computed (cell count, each state's background colour) into its own DOM, which
``--dump-dom`` then prints; a second run saves a screenshot.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration import browser

pytestmark = pytest.mark.slow

TASKS = ["extract", "transform", "publish"]
DAYS = 3

DEMO_DAG = """
    from dagrun import DAG, task

    with DAG("demo", schedule="@daily", start_date="2026-01-01", timezone="Europe/Berlin",
             max_active_runs=3):
        @task
        def extract(ds):
            return ds

        @task
        def transform(ds):
            if ds == "2026-01-02":
                raise ValueError("bad rows on 2026-01-02")
            return ds

        @task
        def publish(ds):
            return ds

        extract() >> transform() >> publish()
    """

PROBE = """<!doctype html>
<html><body>
<iframe id="grid" src="/dags/demo/grid?refresh=0" width="1200" height="700"></iframe>
<pre id="result">pending</pre>
<script>
document.getElementById("grid").addEventListener("load", function () {
  var cells = this.contentDocument.querySelectorAll("td.cell");
  var out = {cells: cells.length, states: {}, colours: {}, failed: []};
  cells.forEach(function (td) {
    var state = td.dataset.state, colour = getComputedStyle(td).backgroundColor;
    out.states[state] = (out.states[state] || 0) + 1;
    out.colours[state] = colour;
    if (state === "failed") out.failed.push({task: td.dataset.task, colour: colour});
  });
  document.getElementById("result").textContent = JSON.stringify(out);
});
</script>
</body></html>
"""


@pytest.fixture
def served(cli_env, dags_dir) -> Iterator[str]:
    """Backfill the demo DAG through the CLI, then serve the store on a free loopback port."""
    browser.require_chromium()
    backfill = browser.backfilled(cli_env, dags_dir, "demo", DEMO_DAG, "2026-01-01", "2026-01-03")
    with (
        backfill as (_, app),
        browser.serving(browser.with_probe(app, PROBE)) as base,
    ):
        yield base


def test_the_grid_in_headless_chromium(served, tmp_path):
    probe, _ = browser.read_probe(tmp_path, f"{served}/__probe")
    assert probe["cells"] == len(TASKS) * DAYS
    assert probe["states"] == {"success": 7, "failed": 1, "upstream_failed": 1}
    assert probe["failed"] == [{"task": "transform", "colour": probe["colours"]["failed"]}]
    css = browser.stylesheet(served)
    assert probe["colours"]["failed"] == browser.css_colour(css, "failed")
    assert probe["colours"]["success"] == browser.css_colour(css, "success")
    assert probe["colours"]["failed"] != probe["colours"]["success"]


def test_a_screenshot_of_the_grid(served, tmp_path):
    browser.check_screenshot(tmp_path, "grid.png", f"{served}/dags/demo/grid?refresh=0")

"""The Gantt of a run and the durations chart in a real browser: headless Chromium renders
the pages a CLI backfill produced.

As in test_browser.py, a probe page on the same origin loads both pages in iframes and
writes what the browser computed (bars drawn, the fill of a failed and of a successful bar,
the chart's polylines) into its own DOM, which ``--dump-dom`` prints; screenshots of both
pages are saved beside the test's files (gantt.png, durations.png).
"""

from __future__ import annotations

import html
from collections.abc import Iterator

import pytest

from dagrun.store import run_reads
from dagrun.webapp.urls import durations_url, gantt_url
from tests.integration import browser

pytestmark = pytest.mark.slow

#: transform fails its first try on the 1st (its retry succeeds) and both tries on the 2nd,
#: so the 2nd's Gantt has a success bar, an earlier failed try and a failed bar.
DEMO_DAG = """
    from dagrun import DAG, task

    with DAG("demo", schedule="@daily", start_date="2026-01-01", timezone="Europe/Berlin",
             max_active_runs=3):
        @task
        def extract(ds):
            return ds

        @task(retries=1, retry_delay=0)
        def transform(ds, try_number):
            if ds == "2026-01-02" or (ds == "2026-01-01" and try_number == 1):
                raise ValueError(f"bad rows on {ds}")
            return ds

        @task
        def publish(ds):
            return ds

        extract() >> transform() >> publish()
    """

PROBE = """<!doctype html>
<html><body>
<iframe id="gantt" src="{gantt}" width="1200" height="500"></iframe>
<iframe id="durations" src="{durations}" width="1200" height="700"></iframe>
<pre id="result">pending</pre>
<script>
var out = {{}}, left = 2;
function done() {{
  if (--left === 0) document.getElementById("result").textContent = JSON.stringify(out);
}}
document.getElementById("gantt").addEventListener("load", function () {{
  var doc = this.contentDocument, fill = function (sel) {{
    var found = doc.querySelector(sel);
    return found ? getComputedStyle(found).fill : null;
  }};
  out.bars = doc.querySelectorAll("svg.gantt rect.bar").length;
  out.earlier = doc.querySelectorAll("svg.gantt rect.bar.try").length;
  out.failed = fill("svg.gantt rect.bar.s-failed:not(.try)");
  out.success = fill("svg.gantt rect.bar.s-success");
  done();
}});
document.getElementById("durations").addEventListener("load", function () {{
  var doc = this.contentDocument;
  out.polylines = Array.prototype.map.call(
    doc.querySelectorAll("svg.durations polyline.line"),
    function (p) {{ return p.points.numberOfItems; }});
  done();
}});
</script>
</body></html>
"""


@pytest.fixture
def served(cli_env, dags_dir) -> Iterator[tuple[str, str]]:
    """Backfill the demo DAG through the CLI, then serve the store on a free loopback port;
    yields the server's address and the path of the failed run's Gantt."""
    browser.require_chromium()
    backfill = browser.backfilled(cli_env, dags_dir, "demo", DEMO_DAG, "2026-01-01", "2026-01-03")
    with backfill as (store, app):
        with store.read() as conn:
            failed = [r for r in run_reads.runs(conn, "demo") if r.state == "failed"]
        assert len(failed) == 1
        gantt = gantt_url("demo", failed[0].run_id) + "?refresh=0"
        probe = PROBE.format(gantt=html.escape(gantt), durations=durations_url("demo"))
        with browser.serving(browser.with_probe(app, probe)) as base:
            yield base, gantt


def test_the_gantt_and_durations_in_headless_chromium(served, tmp_path):
    base, _ = served
    probe, _ = browser.read_probe(tmp_path, f"{base}/__probe")
    # extract's try, transform's failed first try and its failed retry; publish never ran
    assert probe["bars"] == 3
    assert probe["earlier"] == 1
    css = browser.stylesheet(base)
    assert probe["failed"] == browser.css_colour(css, "failed")
    assert probe["success"] == browser.css_colour(css, "success")
    # the run and its three tasks, a point for each of the 3 runs that recorded one
    assert len(probe["polylines"]) == 4
    assert probe["polylines"][:3] == [3, 3, 3]


@pytest.mark.parametrize("page", ["gantt", "durations"])
def test_screenshots(served, tmp_path, page):
    base, gantt = served
    path = gantt if page == "gantt" else durations_url("demo")
    browser.check_screenshot(tmp_path, f"{page}.png", f"{base}{path}")

"""The Gantt of a run and the durations chart in a real browser: headless Chromium renders
the pages a CLI backfill produced.

As in test_browser.py, a probe page on the same origin loads both pages in iframes and
writes what the browser computed (bars drawn, the fill of a failed and of a successful bar,
the chart's polylines) into its own DOM, which ``--dump-dom`` prints; screenshots of both
pages are saved beside the test's files (gantt.png, durations.png).
"""

from __future__ import annotations

import html
import json
import re
import struct
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from dagrun.store import Store, reads
from dagrun.webapp import WebApp, make_web_server
from dagrun.webapp.urls import durations_url, gantt_url
from tests.helpers import run_cli, write_dag
from tests.integration.test_browser import CHROMIUM, chromium, css_colour

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


def with_probe(app: WebApp, probe: str):
    """The app, plus ``/__probe`` on the same origin (so it may read the iframes' DOM)."""

    def wrapped(environ, start_response):
        if environ.get("PATH_INFO") == "/__probe":
            start_response("200 OK", [("Content-Type", "text/html; charset=utf-8")])
            return [probe.encode()]
        return app(environ, start_response)

    return wrapped


@pytest.fixture
def served(cli_env, dags_dir) -> Iterator[tuple[str, str]]:
    """Backfill the demo DAG through the CLI, then serve the store on a free loopback port;
    yields the server's address and the path of the failed run's Gantt."""
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install chromium; .ci/run does this)")
    write_dag(dags_dir, "demo.py", DEMO_DAG)
    result = run_cli(
        "backfill", "demo", "--start", "2026-01-01", "--end", "2026-01-03", env=cli_env
    )
    assert result.returncode == 1, result.stderr  # the 2nd fails, as intended
    store = Store(cli_env["DAGRUN_DB_URL"])
    with store.read() as conn:
        failed = [r for r in reads.runs(conn, "demo") if r.state == "failed"]
    assert len(failed) == 1
    gantt = gantt_url("demo", failed[0].run_id) + "?refresh=0"
    probe = PROBE.format(gantt=html.escape(gantt), durations=durations_url("demo"))
    app = WebApp(store, logs_root=Path(cli_env["DAGRUN_HOME"]) / "logs")
    server = make_web_server(with_probe(app, probe), "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", gantt
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
        store.dispose()


def test_the_gantt_and_durations_in_headless_chromium(served, tmp_path):
    base, _ = served
    result = chromium(tmp_path, "--virtual-time-budget=10000", "--dump-dom", f"{base}/__probe")
    assert result.returncode == 0, result.stderr[-2000:]
    found = re.search(r'<pre id="result">(.*?)</pre>', result.stdout, re.S)
    assert found, result.stdout[-2000:]
    probe = json.loads(html.unescape(found.group(1)))
    # extract's try, transform's failed first try and its failed retry; publish never ran
    assert probe["bars"] == 3
    assert probe["earlier"] == 1
    with urllib.request.urlopen(f"{base}/static/dagrun.css", timeout=10) as response:
        css = response.read().decode()
    assert probe["failed"] == css_colour(css, "failed")
    assert probe["success"] == css_colour(css, "success")
    # the run and its three tasks, a point for each of the 3 runs that recorded one
    assert len(probe["polylines"]) == 4
    assert probe["polylines"][:3] == [3, 3, 3]


@pytest.mark.parametrize("page", ["gantt", "durations"])
def test_screenshots(served, tmp_path, page):
    base, gantt = served
    shot = tmp_path / f"{page}.png"
    path = gantt if page == "gantt" else durations_url("demo")
    result = chromium(
        tmp_path,
        f"--screenshot={shot}",
        "--window-size=1280,900",
        "--hide-scrollbars",
        f"{base}{path}",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert shot.is_file(), result.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", data[16:24]) == (1280, 900)
    assert len(data) > 10_000, "the screenshot looks blank"

"""The Graph view in a real browser: headless Chromium renders the SVG of a run a backfill
produced, with a task group, a mapped task and a failure.

As in ``test_browser.py``: the page is served by the threaded server ``dagrun web`` uses; a
probe page on the same origin loads the graph in an iframe and writes what the browser
computed (boxes, edges, each state's fill) into its own DOM, which ``--dump-dom`` prints; a
second run saves a screenshot, ``graph.png``.
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
from dagrun.webapp.urls import graph_url
from tests.helpers import run_cli, write_dag
from tests.integration.test_browser import CHROMIUM, chromium, css_colour

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


def with_probe(app: WebApp, graph: str):
    """The app, plus ``/__probe`` loading ``graph`` in an iframe: test scaffolding on the
    same origin, so it may read the iframe's DOM. Every other path is the real application."""
    probe = PROBE.replace("__SRC__", html.escape(graph)).encode()

    def wrapped(environ, start_response):
        if environ.get("PATH_INFO") == "/__probe":
            start_response("200 OK", [("Content-Type", "text/html; charset=utf-8")])
            return [probe]
        return app(environ, start_response)

    return wrapped


@pytest.fixture
def served(cli_env, dags_dir) -> Iterator[tuple[str, str]]:
    """Backfill one day of the shapes DAG through the CLI, then serve the store on a free
    loopback port; yields the base URL and the graph of the run."""
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install chromium; .ci/run does this)")
    write_dag(dags_dir, "shapes.py", SHAPES_DAG)
    result = run_cli(
        "backfill", "shapes", "--start", "2026-01-01", "--end", "2026-01-01", env=cli_env
    )
    assert result.returncode == 1, result.stderr  # quality.check fails, as intended
    store = Store(cli_env["DAGRUN_DB_URL"])
    with store.read() as conn:
        (run,) = reads.runs(conn, "shapes")
    graph = graph_url("shapes", run.run_id)
    app = WebApp(store, logs_root=Path(cli_env["DAGRUN_HOME"]) / "logs")
    server = make_web_server(with_probe(app, graph), "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", graph
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
        store.dispose()


def test_the_graph_in_headless_chromium(served, tmp_path):
    base, _ = served
    result = chromium(tmp_path, "--virtual-time-budget=10000", "--dump-dom", f"{base}/__probe")
    assert result.returncode == 0, result.stderr[-2000:]
    found = re.search(r'<pre id="result">(.*?)</pre>', result.stdout, re.S)
    assert found, result.stdout[-2000:]
    probe = json.loads(html.unescape(found.group(1)))
    assert probe["boxes"] == probe["drawn"] == len(STATES)
    assert probe["edges"] == EDGES
    assert probe["groups"] == 1
    assert probe["states"] == STATES
    with urllib.request.urlopen(f"{base}/static/dagrun.css", timeout=10) as response:
        css = response.read().decode()
    assert probe["fills"]["failed"] == css_colour(css, "failed")
    assert probe["fills"]["success"] == css_colour(css, "success")
    assert probe["fills"]["failed"] != probe["fills"]["success"]


def test_a_screenshot_of_the_graph(served, tmp_path):
    base, graph = served
    shot = tmp_path / "graph.png"
    result = chromium(
        tmp_path,
        f"--screenshot={shot}",
        "--window-size=1280,900",
        "--hide-scrollbars",
        f"{base}{graph}",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert shot.is_file(), result.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", data[16:24]) == (1280, 900)
    assert len(data) > 10_000, "the screenshot looks blank"

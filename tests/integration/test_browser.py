"""The run grid in a real browser: headless Chromium renders the page a backfill produced.

The page is served by the same threaded server ``dagrun web`` uses, on a free loopback port.
A probe page on the same origin loads the grid in an iframe and writes what the browser
computed (cell count, each state's background colour) into its own DOM, which
``--dump-dom`` then prints; a second run saves a screenshot.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import struct
import subprocess
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from dagrun.store import Store
from dagrun.webapp import WebApp, make_web_server
from tests.helpers import run_cli, write_dag

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
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


def with_probe(app: WebApp):
    """The app, plus ``/__probe``: test scaffolding on the same origin, so it may read the
    iframe's DOM. Every other path is the real application, headers and all."""

    def wrapped(environ, start_response):
        if environ.get("PATH_INFO") == "/__probe":
            start_response("200 OK", [("Content-Type", "text/html; charset=utf-8")])
            return [PROBE.encode()]
        return app(environ, start_response)

    return wrapped


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / "chromium-profile"
    command = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        f"--user-data-dir={profile}",
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def css_colour(css: str, state: str) -> str:
    """The rgb() a browser reports for the background the stylesheet gives a state."""
    found = re.search(rf"\.s-{state}\s*\{{\s*background:\s*#([0-9a-fA-F]{{6}})", css)
    assert found, f"no colour for {state} in the stylesheet"
    r, g, b = (int(found.group(1)[i : i + 2], 16) for i in (0, 2, 4))
    return f"rgb({r}, {g}, {b})"


@pytest.fixture
def served(cli_env, dags_dir, tmp_path) -> Iterator[str]:
    """Backfill the demo DAG through the CLI, then serve the store on a free loopback port."""
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install chromium; .ci/run does this)")
    write_dag(dags_dir, "demo.py", DEMO_DAG)
    result = run_cli(
        "backfill", "demo", "--start", "2026-01-01", "--end", "2026-01-03", env=cli_env
    )
    assert result.returncode == 1, result.stderr  # one task failed, as intended
    store = Store(cli_env["DAGRUN_DB_URL"])
    app = WebApp(store, logs_root=Path(cli_env["DAGRUN_HOME"]) / "logs")
    server = make_web_server(with_probe(app), "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
        store.dispose()


def test_the_grid_in_headless_chromium(served, tmp_path):
    result = chromium(tmp_path, "--virtual-time-budget=10000", "--dump-dom", f"{served}/__probe")
    assert result.returncode == 0, result.stderr[-2000:]
    found = re.search(r'<pre id="result">(.*?)</pre>', result.stdout, re.S)
    assert found, result.stdout[-2000:]
    probe = json.loads(html.unescape(found.group(1)))
    assert probe["cells"] == len(TASKS) * DAYS
    assert probe["states"] == {"success": 7, "failed": 1, "upstream_failed": 1}
    assert probe["failed"] == [{"task": "transform", "colour": probe["colours"]["failed"]}]
    with urllib.request.urlopen(f"{served}/static/dagrun.css", timeout=10) as response:
        css = response.read().decode()
    assert probe["colours"]["failed"] == css_colour(css, "failed")
    assert probe["colours"]["success"] == css_colour(css, "success")
    assert probe["colours"]["failed"] != probe["colours"]["success"]


def test_a_screenshot_of_the_grid(served, tmp_path):
    shot = tmp_path / "grid.png"
    result = chromium(
        tmp_path,
        f"--screenshot={shot}",
        "--window-size=1280,900",
        "--hide-scrollbars",
        f"{served}/dags/demo/grid?refresh=0",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert shot.is_file(), result.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1280, 900)
    assert len(data) > 10_000, "the screenshot looks blank"

"""A running attempt's log in a real browser: the page shows the lines its task prints after
the page loaded, appended by ``follow_log.js`` (no reload), under the site's CSP.

A real worker runs a task that prints a line, waits for a file, prints another and waits
again. A probe page on the same origin loads the attempt's log page in an iframe, checks
that the second line is not there, and asks ``/__go`` (test scaffolding beside the app) to
let the task go on; ``/__go`` answers once the line is in the log, so Chromium's virtual
clock, which stands still while a request is pending, cannot outrun the worker. The probe
then waits for the line to appear in the iframe's log and writes what it saw as JSON.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dagrun.store import Store
from dagrun.webapp import WebApp
from tests.helpers import queue_run, start_cli, stop_process, wait_until, write_dag
from tests.integration import browser
from tests.integration.test_web_pages import OPS_DAG
from tests.webapp.test_webapp import call

pytestmark = pytest.mark.slow

LOG = "/dags/ops/runs/R/tasks/talk/tries/1/log"
PROBE = f"""<!doctype html>
<html><body>
<iframe id="log" src="{LOG}" width="1200" height="700"></iframe>
<pre id="result">pending</pre>
<script>
var frame = document.getElementById("log");
function text() {{ return frame.contentDocument.querySelector("pre.log").textContent; }}
frame.addEventListener("load", function () {{
  var out = {{
    before: text().indexOf("before the page loaded") >= 0,
    after_at_load: text().indexOf("after the page loaded") >= 0,
    follows: frame.contentDocument.querySelector("pre[data-follow]") !== null
  }};
  fetch("/__go").then(function () {{
    var timer = setInterval(function () {{
      if (text().indexOf("after the page loaded") < 0) return;
      clearInterval(timer);
      out.after = true;
      out.lines = text().trim().split("\\n").length;
      out.note = frame.contentDocument.getElementById("follow-note").textContent;
      document.getElementById("result").textContent = JSON.stringify(out);
    }}, 100);
  }});
}}, {{ once: true }});
</script>
</body></html>
"""


def with_go(app, go: Path, shown):
    """The app, plus ``/__go``: lets the task go on and answers once ``shown()`` is true."""

    def wrapped(environ, start_response):
        if environ.get("PATH_INFO") != "/__go":
            return app(environ, start_response)
        go.touch()
        wait_until(shown, 30, what="the line printed after the page loaded")
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"gone on"]

    return wrapped


@pytest.fixture
def running(cli_env, dags_dir: Path, tmp_path: Path) -> Iterator[tuple[WebApp, Path]]:
    """The ops DAG's ``talk`` running on a real worker, its first line printed."""
    browser.require_chromium()
    go, stop = tmp_path / "go", tmp_path / "stop"
    write_dag(dags_dir, "ops.py", OPS_DAG.format(go=str(go), stop=str(stop)))
    store = Store(cli_env["DAGRUN_DB_URL"])
    app = WebApp(store, logs_root=Path(cli_env["DAGRUN_HOME"]) / "logs")
    queue_run(store, dags_dir, "ops", run_id="R")
    worker = start_cli("worker", "-c", "2", "--poll", "0.2", env=cli_env, log=tmp_path / "w.log")
    try:
        wait_until(lambda: "before the page loaded" in call(app, LOG).text, 60, what="talk")
        yield app, go
    finally:
        go.touch()
        stop.touch()
        stop_process(worker)
        store.dispose()


def test_the_log_page_shows_lines_printed_after_it_loaded(running, tmp_path):
    app, go = running

    def shown() -> bool:
        return "after the page loaded" in call(app, LOG).text

    wrapped = browser.with_probe(with_go(app, go, shown), PROBE)
    with browser.serving(wrapped) as base:
        probe, log = browser.read_probe(
            tmp_path, f"{base}/__probe", "--enable-logging=stderr", "--v=0", budget_ms=30_000
        )
    assert probe["before"] and probe["follows"] and not probe["after_at_load"]
    assert probe["after"] and probe["note"] == "Following the log as it grows."
    assert probe["lines"] == 3  # dagrun's first line, then the task's two
    assert "Content Security Policy" not in log, log[-2000:]

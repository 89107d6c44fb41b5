"""Big values in a real browser: a run triggered through the CLI with a 120 KB conf, its run
page and the audit log rendered by headless Chromium.

The conf stays in a box that wraps and scrolls, inside the page's width; the audit log keeps
each instant on one line, however long the details beside it. As in test_browser.py, a probe
page on the same origin loads the pages in iframes and writes what the browser computed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from dagrun.store import Store
from dagrun.webapp import WebApp
from tests.helpers import HELLO, run_cli, write_dag
from tests.integration import browser

pytestmark = pytest.mark.slow

WIDTH = 1200

PROBE = """<!doctype html>
<html><body>
<iframe id="run" src="/dags/hello/runs/big?refresh=0" width="{width}" height="700"></iframe>
<iframe id="audit" src="/audit?refresh=0" width="{width}" height="700"></iframe>
<pre id="result">pending</pre>
<script>
var out = {{}}, left = 2;
function done() {{
  if (--left === 0) document.getElementById("result").textContent = JSON.stringify(out);
}}
function lines(element) {{
  var range = element.ownerDocument.createRange();
  range.selectNodeContents(element);
  var tops = new Set();
  Array.prototype.forEach.call(range.getClientRects(), function (r) {{
    tops.add(Math.round(r.top));
  }});
  return tops.size;
}}
document.getElementById("run").addEventListener("load", function () {{
  var doc = this.contentDocument, conf = doc.querySelector("pre.conf");
  out.run_scroll_width = doc.documentElement.scrollWidth;
  out.conf_right = conf.getBoundingClientRect().right;
  out.conf_height = conf.getBoundingClientRect().height;
  out.conf_scrolls = conf.scrollHeight > conf.clientHeight;
  done();
}});
document.getElementById("audit").addEventListener("load", function () {{
  var doc = this.contentDocument;
  out.audit_scroll_width = doc.documentElement.scrollWidth;
  out.at_lines = Array.prototype.map.call(doc.querySelectorAll("table.audit td.at"), lines);
  done();
}});
</script>
</body></html>
"""


@pytest.fixture
def served(cli_env, dags_dir, tmp_path) -> Iterator[str]:
    """A run of ``hello`` triggered with a 120 KB conf (rows with spaces between their
    words, and one long string with none), then paused: two lines of the audit log."""
    browser.require_chromium()
    write_dag(dags_dir, "hello.py", HELLO)
    rows = [{"id": i, "sku": f"SKU-{i:06d}", "note": "restock the shelf"} for i in range(1000)]
    conf = tmp_path / "conf.json"
    conf.write_text(json.dumps({"rows": rows, "blob": "x" * 60_000}))
    assert 100_000 < conf.stat().st_size < 1024 * 1024  # shown, not cut to its size
    trigger = ["trigger", "hello", "--run-id", "big", "--conf", f"@{conf}"]
    for args in (trigger, ["dags", "pause", "hello"]):
        assert run_cli(*args, env=cli_env).returncode == 0
    store = Store(cli_env["DAGRUN_DB_URL"])
    app = WebApp(store, logs_root=Path(cli_env["DAGRUN_HOME"]) / "logs")
    try:
        with browser.serving(browser.with_probe(app, PROBE.format(width=WIDTH))) as base:
            yield base
    finally:
        store.dispose()


def test_a_big_conf_stays_in_its_box_and_audit_instants_on_one_line(served, tmp_path):
    found, _ = browser.read_probe(tmp_path, f"{served}/__probe")
    assert found["run_scroll_width"] <= WIDTH and found["conf_right"] <= WIDTH
    assert found["conf_scrolls"] and found["conf_height"] < 700
    assert found["audit_scroll_width"] <= WIDTH
    assert found["at_lines"] == [1, 1]  # the pause and the trigger
    browser.check_screenshot(tmp_path, "run.png", f"{served}/dags/hello/runs/big?refresh=0")
    browser.check_screenshot(tmp_path, "audit.png", f"{served}/audit?refresh=0")

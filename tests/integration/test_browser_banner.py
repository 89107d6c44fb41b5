"""The scheduler banner in a real browser: a run triggered through the CLI with no
scheduler about, its store served as ``dagrun web`` serves it, the pages rendered by
headless Chromium.

As in test_browser.py, a probe page on the same origin loads pages in iframes and writes
what the browser computed (the banner shown, where, and in what colours) into its own DOM;
a screenshot of the DAG list with the banner is saved beside the test's files.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dagrun.store import Store, heartbeats
from dagrun.store.heartbeats import Role
from dagrun.webapp import WebApp
from tests.helpers import HELLO, run_cli, write_dag
from tests.integration import browser

pytestmark = pytest.mark.slow


PROBE = """<!doctype html>
<html><body>
<iframe id="page" src="{page}" width="1200" height="600"></iframe>
<pre id="result">pending</pre>
<script>
document.getElementById("page").addEventListener("load", function () {{
  var doc = this.contentDocument, banner = doc.querySelector("[data-banner=scheduler]");
  var content = doc.querySelector("main h1, main h2, main table"), out = {{shown: false}};
  if (banner) {{
    var box = banner.getBoundingClientRect(), style = getComputedStyle(banner);
    var header = doc.querySelector("header.top").getBoundingClientRect();
    out = {{
      shown: box.height > 0 && box.width > 0,
      role: banner.getAttribute("role"),
      below_header: box.top >= header.bottom,
      above_content: box.bottom <= content.getBoundingClientRect().top,
      background: style.backgroundColor,
      text: banner.textContent
    }};
  }}
  document.getElementById("result").textContent = JSON.stringify(out);
}});
</script>
</body></html>
"""


@pytest.fixture
def waiting(cli_env, dags_dir) -> Iterator[Store]:
    """A run of ``hello`` triggered through the CLI, and no scheduler to start it."""
    browser.require_chromium()
    write_dag(dags_dir, "hello.py", HELLO)
    assert run_cli("trigger", "hello", env=cli_env).returncode == 0
    store = Store(cli_env["DAGRUN_DB_URL"])
    try:
        yield store
    finally:
        store.dispose()


def probe(store: Store, cli_env, tmp_path: Path, page: str) -> tuple[dict, str]:
    """What the browser computed of ``page``; the base URL it was served from, for more."""
    app = WebApp(store, logs_root=Path(cli_env["DAGRUN_HOME"]) / "logs")
    with browser.serving(browser.with_probe(app, PROBE.format(page=page))) as base:
        found, _ = browser.read_probe(tmp_path, f"{base}/__probe")
        if found["shown"]:
            browser.check_screenshot(tmp_path, "banner.png", f"{base}{page}")
    return found, base


@pytest.mark.parametrize("page", ["/?refresh=0", "/dags/hello/grid?refresh=0"])
def test_the_banner_shows_above_the_page_while_a_run_waits(waiting, cli_env, tmp_path, page):
    found, _ = probe(waiting, cli_env, tmp_path, page)
    assert found["shown"] and found["role"] == "alert"
    assert found["below_header"] and found["above_content"]
    assert found["background"] == "rgb(255, 248, 197)"  # .banner's, light scheme
    assert "No scheduler has sent a heartbeat yet" in found["text"]
    assert "dagrun scheduler" in found["text"]
    assert (tmp_path / "banner.png").is_file()


def test_no_banner_once_a_scheduler_beats(waiting, cli_env, tmp_path):
    with waiting.write() as conn:
        now = waiting.now(conn)
        heartbeats.beat(conn, "s", Role.SCHEDULER, "h", 1, now, now, None)
    found, _ = probe(waiting, cli_env, tmp_path, "/?refresh=0")
    assert found == {"shown": False}

"""The grid's script and dark mode in a real browser: headless Chromium under the site's CSP.

A probe page on the same origin loads grid pages in iframes and writes what it saw into its
own DOM, which ``--dump-dom`` prints: dagrun.js folds a task group in place (rows hidden, no
navigation, ``?fold=`` kept in the address); a page with ``refresh=0`` never reloads; an
active page reloads on its own, not while its tab is hidden, and at once when shown again
overdue. Chromium's console (``--enable-logging=stderr``) would report any CSP violation.
A second run under ``--force-dark-mode`` reads the colours of the dark stylesheet, and a
third saves a screenshot, grid.png.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dagrun.store import Store
from tests.integration import browser
from tests.webapp.test_grid import build_shapes

pytestmark = pytest.mark.slow

#: What the probe measures. The watch DAG's run is active (its sensor waits), so its grid
#: refreshes, every second as the fixture serves it.
PROBE = """<!doctype html>
<html><body>
<iframe id="fold" src="/dags/shapes/grid?refresh=0" width="900" height="400"></iframe>
<iframe id="quiet" src="/dags/watch/grid?refresh=0"></iframe>
<iframe id="live" src="/dags/watch/grid"></iframe>
<iframe id="hidden" src="/dags/watch/grid"></iframe>
<pre id="result">pending</pre>
<script>
var out = {loads: {fold: 0, quiet: 0, live: 0, hidden: 0}};

function frame(id, first) {
  var element = document.getElementById(id);
  element.addEventListener("load", function () {
    out.loads[id] += 1;
    if (out.loads[id] === 1 && first) first(element.contentWindow, element.contentDocument);
  });
}

function setVisibility(doc, state) {
  var answer = function () { return state; };
  Object.defineProperty(doc, "visibilityState", {configurable: true, get: answer});
  doc.dispatchEvent(new Event("visibilitychange"));
}

frame("fold", function (win, doc) {
  function hidden() {
    return Array.prototype.map.call(doc.querySelectorAll("tbody tr[data-in]"), function (tr) {
      return tr.dataset.in + (tr.hidden ? ":hidden" : ":shown");
    });
  }
  var toggle = doc.querySelector('a.fold[data-fold="prep"]');
  out.before = hidden();
  toggle.click();
  out.folded = hidden();
  out.search = win.location.search;
  out.expanded = toggle.getAttribute("aria-expanded");
  out.toggleHref = toggle.getAttribute("href");
  toggle.click();
  out.unfolded = hidden();
});
frame("quiet");
frame("live");
frame("hidden", function (win, doc) { setVisibility(doc, "hidden"); });

setTimeout(function () {
  out.atThreeSeconds = JSON.parse(JSON.stringify(out.loads));
  setVisibility(document.getElementById("hidden").contentDocument, "visible");
  setTimeout(function () {
    out.afterShown = out.loads.hidden;
    document.getElementById("result").textContent = JSON.stringify(out);
  }, 500);
}, 3000);
</script>
</body></html>
"""

DARK_PROBE = """<!doctype html>
<html><body>
<iframe id="grid" src="/dags/shapes/grid?refresh=0"></iframe>
<pre id="result">pending</pre>
<script>
document.getElementById("grid").addEventListener("load", function () {
  var doc = this.contentDocument, style = this.contentWindow.getComputedStyle;
  document.getElementById("result").textContent = JSON.stringify({
    background: style(doc.body).backgroundColor,
    text: style(doc.body).color,
    header: style(doc.querySelector("header.top")).backgroundColor,
    success: style(doc.querySelector('td.cell[data-state="success"]')).backgroundColor
  });
});
</script>
</body></html>
"""


@pytest.fixture
def served(sqlite_store: Store, dags_dir: Path) -> Iterator[str]:
    """The shapes and watch DAGs' grids, refreshing every second, on a free loopback port."""
    browser.require_chromium()
    shapes = build_shapes(sqlite_store, dags_dir, refresh_seconds=1)
    with browser.serving(
        browser.with_probes(shapes.app, {"/__probe": PROBE, "/__dark": DARK_PROBE})
    ) as base:
        yield base


def probe(tmp_path: Path, url: str, *flags: str) -> tuple[dict, str]:
    """What the probe page at ``url`` wrote, and Chromium's log (console messages included)."""
    return browser.read_probe(
        tmp_path, url, "--enable-logging=stderr", "--v=0", *flags, budget_ms=15_000
    )


def test_the_script_folds_groups_in_place_and_refreshes_only_when_it_should(served, tmp_path):
    seen, log = probe(tmp_path, f"{served}/__probe")
    assert "Content Security Policy" not in log, log[-2000:]
    assert seen["before"] == ["prep:shown", "prep:shown", "prep.inner:shown"]
    assert seen["folded"] == ["prep:hidden", "prep:hidden", "prep.inner:hidden"]
    assert seen["search"] == "?refresh=0&fold=prep"
    assert seen["expanded"] == "false"
    assert seen["toggleHref"] == "/dags/shapes/grid?refresh=0"
    assert seen["unfolded"] == seen["before"]
    loads = seen["atThreeSeconds"]
    assert loads["fold"] == 1, "folding in place does not navigate"
    assert loads["quiet"] == 1, "refresh=0 never reloads"
    assert loads["live"] >= 2, "an active page reloads every second"
    assert loads["hidden"] == 1, "a hidden tab does not reload"
    assert seen["afterShown"] == 2, "shown again overdue, it reloads at once"


def test_the_dark_stylesheet_applies_when_the_system_prefers_it(served, tmp_path):
    light, _ = probe(tmp_path, f"{served}/__dark")
    dark, log = probe(tmp_path, f"{served}/__dark", "--force-dark-mode")
    assert "Content Security Policy" not in log, log[-2000:]
    assert light["background"] == "rgb(255, 255, 255)"
    assert dark["background"] == "rgb(13, 17, 23)"  # --bg in the dark block
    assert dark["text"] != light["text"] and dark["header"] != light["header"]
    assert dark["success"] == light["success"], "state colours are the same in both"


def test_a_screenshot_of_the_grid_with_groups_and_a_mapped_task(served, tmp_path):
    browser.check_screenshot(
        tmp_path, "grid.png", f"{served}/dags/shapes/grid?refresh=0&expand=add"
    )

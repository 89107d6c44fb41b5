/* dagrun web: the one script the pages load (the CSP allows script-src 'self' and nothing
   inline). Every page works without it; it only
   - refreshes a page every <body data-refresh> seconds (0: never) while the tab is shown,
     and at once when a hidden tab that fell due is shown again;
   - folds and unfolds task groups of the grid in place, keeping ?fold= in the address and
     the page's own links in step, so a refresh or a link shows the same rows. */
(function () {
  "use strict";

  function visible() {
    return document.visibilityState === "visible";
  }

  function autoRefresh(seconds) {
    var due = Date.now() + seconds * 1000;
    var timer = null;

    function arm() {
      clearTimeout(timer);
      timer = setTimeout(function () {
        if (visible()) location.reload();
      }, Math.max(0, due - Date.now()));
    }

    document.addEventListener("visibilitychange", function () {
      if (!visible()) clearTimeout(timer);
      else if (Date.now() >= due) location.reload();
      else arm();
    });
    if (visible()) arm();
  }

  // ---- folding task groups: the same rules as dagrun/webapp/grid.py

  function folded() {
    var value = new URLSearchParams(location.search).get("fold");
    return new Set(value ? value.split(",").filter(Boolean) : []);
  }

  function paths(group) {
    // "a.b" -> ["a", "a.b"]: the group and those around it.
    var parts = group.split("."), out = [];
    for (var i = 1; i <= parts.length; i++) out.push(parts.slice(0, i).join("."));
    return out;
  }

  function toggled(set, name) {
    var next = new Set(set);
    if (next.has(name)) next.delete(name);
    else next.add(name);
    return next;
  }

  function withFold(href, set) {
    var url = new URL(href, location.href);
    var value = Array.from(set).sort().join(",");
    if (value) url.searchParams.set("fold", value);
    else url.searchParams.delete("fold");
    return url.pathname + url.search + url.hash;
  }

  function showFolded(table, set) {
    table.querySelectorAll("tbody tr[data-in]").forEach(function (row) {
      row.hidden = paths(row.dataset.in).some(function (p) { return set.has(p); });
    });
    table.querySelectorAll("a.fold").forEach(function (link) {
      link.setAttribute("aria-expanded", String(!set.has(link.dataset.fold)));
      link.href = withFold(link.href, toggled(set, link.dataset.fold));
    });
    document.querySelectorAll("a[href]:not(.fold)").forEach(function (link) {
      if (link.pathname === location.pathname) link.href = withFold(link.href, set);
    });
    history.replaceState(history.state, "", withFold(location.href, set));
  }

  function foldInPlace(table) {
    table.addEventListener("click", function (event) {
      var link = event.target.closest("a.fold");
      if (!link || event.button !== 0 || event.ctrlKey || event.metaKey || event.shiftKey) return;
      event.preventDefault();
      showFolded(table, toggled(folded(), link.dataset.fold));
    });
  }

  var seconds = Number(document.body.dataset.refresh);
  if (seconds > 0) autoRefresh(seconds);
  var grid = document.querySelector("table.grid");
  if (grid) foldInPlace(grid);
})();

/* dagrun web: follows a running attempt's log (the CSP allows script-src 'self' and nothing
   inline; only the log page of a running attempt loads this). Every second while the tab is
   shown it asks <pre data-follow> for what was written after data-offset, appends that as
   text (never as HTML), keeps the view at the bottom if it was there, and reloads the page
   once the attempt has ended, to show its outcome. Without it the page shows the log as it
   was when it loaded. */
(function () {
  "use strict";

  var PERIOD = 1000;
  var pre = document.querySelector("pre[data-follow]");
  if (!pre) return;
  var note = document.getElementById("follow-note");
  var offset = Number(pre.dataset.offset) || 0;
  var timer = null;
  var busy = false;
  var failures = 0;

  function shown() {
    return document.visibilityState === "visible";
  }

  function atBottom() {
    return window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 40;
  }

  function say(text) {
    if (note) note.textContent = text;
  }

  function url() {
    var base = pre.dataset.follow;
    return base + (base.indexOf("?") < 0 ? "?" : "&") + "offset=" + offset;
  }

  function append(chunk) {
    var stay = atBottom();
    if (chunk.skipped) {
      pre.appendChild(document.createTextNode("\n[" + chunk.skipped + " bytes left out]\n"));
    }
    if (chunk.text) pre.appendChild(document.createTextNode(chunk.text));
    offset = chunk.offset;
    if (stay && (chunk.text || chunk.skipped)) {
      window.scrollTo(0, document.documentElement.scrollHeight);
    }
  }

  function arm(delay) {
    clearTimeout(timer);
    timer = setTimeout(poll, delay);
  }

  function poll() {
    timer = null;
    if (busy || !shown()) return; // a shown tab polls again (visibilitychange)
    busy = true;
    fetch(url(), { headers: { Accept: "application/json" }, cache: "no-store" })
      .then(function (response) {
        if (!response.ok) throw new Error("the server answered " + response.status);
        return response.json();
      })
      .then(function (chunk) {
        busy = false;
        failures = 0;
        append(chunk);
        if (!chunk.running) {
          say("The attempt has ended: reloading the page for its outcome.");
          location.reload();
          return;
        }
        say(chunk.found
          ? "Following the log as it grows."
          : "Waiting for the attempt's output in this host's log folder.");
        arm(PERIOD);
      })
      .catch(function (error) {
        busy = false;
        failures += 1;
        say("Cannot follow the log (" + error.message + "); trying again.");
        arm(PERIOD * Math.min(10, 1 + failures));
      });
  }

  document.addEventListener("visibilitychange", function () {
    if (shown() && timer === null && !busy) poll();
  });
  arm(PERIOD);
})();

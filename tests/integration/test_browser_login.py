"""The login form in a real browser: headless Chromium fills it in and sends it, and the page
it goes on to shows who is logged in. This proves what a client in Python cannot: that the
browser keeps the SameSite=Strict, HttpOnly cookies, sends the login form's cookie back with
the form (the form token's double submit), and follows the redirect to ``next`` under the
site's strict content security policy. A second run saves a screenshot of the form."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dagrun.store import Store, accounts
from dagrun.store.accounts import ScryptCost
from dagrun.webapp import WebApp
from dagrun.webapp.auth import Gate
from tests.integration import browser

pytestmark = pytest.mark.slow

PASSWORD = "alice-password"

PROBE = """<!doctype html>
<html><body>
<iframe id="page" src="/login?next=/audit" width="1200" height="700"></iframe>
<pre id="result">pending</pre>
<script>
var sent = false;
document.getElementById("page").addEventListener("load", function () {
  var doc = this.contentDocument;
  if (!sent) {
    sent = true;
    doc.getElementById("name").value = "alice";
    doc.getElementById("password").value = "PASSWORD";
    doc.querySelector("form.login").submit();
    return;
  }
  var account = doc.querySelector("form.account span");
  document.getElementById("result").textContent = JSON.stringify({
    path: this.contentWindow.location.pathname,
    account: account ? account.textContent : null,
    scriptSeesCookies: doc.cookie
  });
});
</script>
</body></html>
""".replace("PASSWORD", PASSWORD)


@pytest.fixture
def served(sqlite_url: str, tmp_path: Path) -> Iterator[str]:
    """A store with account alice, served behind the login on a free loopback port."""
    browser.require_chromium()
    store = Store(sqlite_url)
    with store.write() as conn:
        hashed = accounts.hash_password(PASSWORD, ScryptCost(n=2**10, r=8, p=1))
        accounts.add_account(conn, "alice", hashed, store.now(conn))
        gate = Gate(accounts.session_key(conn))
    app = WebApp(store, logs_root=tmp_path, gate=gate)
    try:
        with browser.serving(browser.with_probe(app, PROBE)) as base:
            yield base
    finally:
        store.dispose()


def test_chromium_logs_in_with_the_form_and_lands_on_next(served, tmp_path):
    probe, _ = browser.read_probe(tmp_path, f"{served}/__probe")
    assert probe == {
        "path": "/audit",
        "account": "alice",
        "scriptSeesCookies": "",  # HttpOnly: no script reads the session
    }


def test_a_screenshot_of_the_login_form(served, tmp_path):
    browser.check_screenshot(tmp_path, "login.png", f"{served}/login?next=/")

"""The login's parts without a server: the session cookie's signer, the slow-down of failed
logins, where a login may send the browser next, and the gate's answers called through WSGI
(the whole login over real HTTP is in tests/integration/test_web_login.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from io import BytesIO
from urllib.parse import urlencode, urlsplit

import pytest

from dagrun.store import accounts, audit
from dagrun.store.accounts import ScryptCost
from dagrun.webapp import WebApp
from dagrun.webapp.auth import (
    LOGIN_COOKIE,
    SESSION_COOKIE,
    FailedLogins,
    Gate,
    Sessions,
    cookie_value,
    local_target,
)
from dagrun.webapp.http import Request

KEY = bytes(range(32))


class Clock:
    def __init__(self, now: float = 1_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


# ---------------------------------------------------------------- the cookie's signer


def test_a_session_cookie_reads_back_as_its_account_and_password_fingerprint():
    sessions = Sessions(KEY)
    cookie = sessions.issue("alice", "scrypt$1$2$3$salt$hash")
    claim = sessions.read(cookie)
    assert claim is not None and claim[0] == "alice"
    assert claim[1] != sessions.read(sessions.issue("alice", "scrypt$1$2$3$salt$other"))[1]


@pytest.mark.parametrize("change", ["flip", "cut", "other key", "garbage", "empty"])
def test_a_cookie_that_was_not_signed_with_the_key_is_nobodys(change):
    sessions = Sessions(KEY)
    cookie = sessions.issue("alice", "h")
    forged = {
        "flip": cookie[:-2] + ("A" if cookie[-2] != "A" else "B") + cookie[-1],
        "cut": cookie[:-5],
        "other key": Sessions(bytes(32)).issue("alice", "h"),
        "garbage": "not.a.cookie",
        "empty": "",
    }[change]
    assert sessions.read(forged) is None


def test_a_cookie_expires_after_its_seconds_exactly():
    clock = Clock()
    sessions = Sessions(KEY, seconds=3600, clock=clock)
    cookie = sessions.issue("alice", "h")
    clock.now += 3600
    assert sessions.read(cookie) is not None
    clock.now += 1
    assert sessions.read(cookie) is None


def test_a_forms_token_is_bound_to_its_session_and_key():
    sessions = Sessions(KEY)
    one, two = sessions.issue("alice", "h"), sessions.issue("bob", "h")
    assert sessions.form_token(one) == sessions.form_token(one)
    assert sessions.form_token(one) != sessions.form_token(two)
    assert sessions.form_token(one) != Sessions(bytes(32)).form_token(one)


# ---------------------------------------------------------------- the slow-down


def test_five_failures_pass_then_each_further_one_waits_twice_as_long_up_to_the_cap():
    clock = Clock()
    failures = FailedLogins(clock=clock)
    waits = []
    for _ in range(12):
        assert failures.wait("10.0.0.9") == 0.0  # waited out: may try again
        waits.append(failures.failed("10.0.0.9"))
        clock.now += waits[-1]
    assert waits == [0, 0, 0, 0, 2, 4, 8, 16, 32, 64, 128, 256]
    assert failures.failed("10.0.0.9") == 300  # the cap
    assert failures.wait("10.0.0.9") == 300
    clock.now += 299.5
    assert failures.wait("10.0.0.9") == pytest.approx(0.5)


def test_an_address_waiting_out_its_block_is_refused_and_others_are_not():
    clock = Clock()
    failures = FailedLogins(clock=clock)
    for _ in range(5):
        failures.failed("10.0.0.9")
    assert failures.wait("10.0.0.9") == 2.0
    assert failures.wait("10.0.0.10") == 0.0
    clock.now += 2.0
    assert failures.wait("10.0.0.9") == 0.0


def test_quiet_minutes_or_a_success_start_the_count_again():
    clock = Clock()
    failures = FailedLogins(clock=clock)
    for _ in range(4):
        failures.failed("a")
        failures.failed("b")
    clock.now += 600
    assert failures.failed("a") == 0  # ten quiet minutes: the first failure again
    failures.succeeded("b")
    assert failures.failed("b") == 0


def test_the_oldest_addresses_are_forgotten_past_the_limit():
    failures = FailedLogins(allowed=1, most_addresses=2, clock=Clock())
    for address in ("a", "b", "c"):
        failures.failed(address)
    assert failures.wait("a") == 0.0
    assert failures.wait("b") > 0 and failures.wait("c") > 0


# ---------------------------------------------------------------- where to go next


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("/dags/shop/grid?refresh=0", "/dags/shop/grid?refresh=0"),
        ("/", "/"),
        (None, "/"),
        ("", "/"),
        ("https://evil.example/", "/"),
        ("//evil.example/x", "/"),
        ("/\\evil.example", "/"),
        ("/\t/evil.example", "/"),
        ("javascript:alert(1)", "/"),
        ("dags", "/"),
        ("/login?next=/x", "/"),
        ("/logout", "/"),
    ],
)
def test_a_login_goes_on_only_to_a_path_of_this_site(target, expected):
    assert local_target(target) == expected


def test_cookies_are_read_by_name_and_a_bad_header_is_none():
    request = Request("GET", "/", {}, {"cookie": "a=1; dagrun_session=abc.def; b=2"})
    assert cookie_value(request, SESSION_COOKIE) == "abc.def"
    assert cookie_value(request, "missing") == ""
    assert cookie_value(Request("GET", "/", {}, {"cookie": '"\\'}), SESSION_COOKIE) == ""


# ---------------------------------------------------------------- the gate through WSGI


@dataclass
class Reply:
    status: int
    headers: list[tuple[str, str]]
    body: str

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)

    def cookies(self) -> dict[str, str]:
        """Set-Cookie headers by cookie name: the whole header."""
        found = [v for k, v in self.headers if k.lower() == "set-cookie"]
        return {v.split("=", 1)[0]: v for v in found}


class Browser:
    """Calls the app as a WSGI server would, keeping the cookies it is given."""

    def __init__(self, app: WebApp, address: str = "203.0.113.7"):
        self.app, self.address, self.jar = app, address, {}

    def go(self, url: str, form: dict | None = None, **headers: str) -> Reply:
        parts = urlsplit(url)
        body = urlencode(form or {}).encode()
        environ = {
            "REQUEST_METHOD": "POST" if form is not None else "GET",
            "PATH_INFO": parts.path,
            "QUERY_STRING": parts.query,
            "REMOTE_ADDR": self.address,
            "CONTENT_TYPE": "application/x-www-form-urlencoded",
            "CONTENT_LENGTH": str(len(body)),
            "wsgi.input": BytesIO(body),
            "HTTP_COOKIE": "; ".join(f"{k}={v}" for k, v in self.jar.items()),
            **{f"HTTP_{k.upper()}": v for k, v in headers.items()},
        }
        seen = {}

        def start_response(status, headers):
            seen["status"], seen["headers"] = int(status.split()[0]), headers

        text = b"".join(self.app(environ, start_response)).decode()
        reply = Reply(seen["status"], seen["headers"], text)
        for name, header in reply.cookies().items():
            value = header.split(";", 1)[0].split("=", 1)[1]
            if "Max-Age=0" in header:
                self.jar.pop(name, None)
            else:
                self.jar[name] = value
        return reply

    def log_in(self, name: str, password: str, **headers: str) -> Reply:
        form = self.go("/login", **headers)
        token = re.search(r'name="form_token" value="([^"]+)"', form.body).group(1)
        sent = {"form_token": token, "name": name, "password": password, "next": "/audit"}
        return self.go("/login", sent, **headers)


@pytest.fixture
def gated(sqlite_store, tmp_path):
    """A web app behind a gate, over a store with account alice (cheaply hashed)."""
    with sqlite_store.write() as conn:
        hashed = accounts.hash_password("alice-password", ScryptCost(n=2**10, r=8, p=1))
        accounts.add_account(conn, "alice", hashed, sqlite_store.now(conn))
        key = accounts.session_key(conn)

    def make(**options) -> WebApp:
        return WebApp(sqlite_store, logs_root=tmp_path, gate=Gate(key, **options))

    return make


def test_a_login_behind_a_trusted_proxy_over_https_makes_a_secure_cookie(gated):
    browser = Browser(gated(trusted_proxy=True))
    reply = browser.log_in("alice", "alice-password", x_forwarded_proto="https")
    assert reply.status == 303
    assert reply.cookies()[SESSION_COOKIE].endswith("; HttpOnly; SameSite=Strict; Secure")


def test_an_untrusted_proxy_header_makes_no_secure_cookie(gated):
    browser = Browser(gated())
    reply = browser.log_in("alice", "alice-password", x_forwarded_proto="https")
    assert reply.status == 303
    assert "Secure" not in reply.cookies()[SESSION_COOKIE]


def test_the_client_address_comes_from_a_trusted_proxy_only(gated, sqlite_store):
    forwarded = {"x_forwarded_for": "198.51.100.1, 192.0.2.44"}
    Browser(gated(trusted_proxy=True)).log_in("alice", "bad-password", **forwarded)
    Browser(gated()).log_in("alice", "bad-password", **forwarded)
    with sqlite_store.read() as conn:
        actors = [e.actor for e in audit.entries(conn) if e.action == "login_failed"]
    assert actors == ["alice@203.0.113.7", "alice@192.0.2.44"]  # newest first


def test_a_login_form_sent_without_its_cookie_is_refused(gated):
    browser = Browser(gated())
    form = browser.go("/login")
    token = re.search(r'name="form_token" value="([^"]+)"', form.body).group(1)
    browser.jar.pop(LOGIN_COOKIE)  # as a form posted from another site arrives
    sent = {"form_token": token, "name": "alice", "password": "alice-password"}
    reply = browser.go("/login", sent)
    assert reply.status == 403 and "expired or came from another site" in reply.body
    assert SESSION_COOKIE not in reply.cookies()


def test_a_link_from_another_site_reloads_the_login_page_once_as_this_sites(gated):
    browser = Browser(gated())
    bounced = browser.go("/login?next=/audit", sec_fetch_site="cross-site")
    assert '<meta http-equiv="refresh" content="0; url=/login?next=%2Faudit&amp;again=1">' in (
        bounced.body
    )
    again = browser.go("/login?next=/audit&again=1", sec_fetch_site="cross-site")
    assert "http-equiv" not in again.body  # never more than once


def test_the_login_page_of_a_logged_in_browser_goes_on_to_next(gated):
    browser = Browser(gated())
    browser.log_in("alice", "alice-password")
    reply = browser.go("/login?next=/dags/shop/grid")
    assert (reply.status, reply.header("Location")) == (302, "/dags/shop/grid")


def test_deleting_the_account_or_giving_it_a_new_password_ends_its_sessions(gated, sqlite_store):
    browser = Browser(gated())
    browser.log_in("alice", "alice-password")
    assert browser.go("/audit").status == 200
    with sqlite_store.write() as conn:
        accounts.delete_account(conn, "alice")
        new = accounts.hash_password("alice-password", ScryptCost(n=2**10, r=8, p=1))
        accounts.add_account(conn, "alice", new, sqlite_store.now(conn))
    assert browser.go("/audit").status == 302


def test_a_logout_needs_its_forms_token(gated):
    browser = Browser(gated())
    browser.log_in("alice", "alice-password")
    page = browser.go("/audit")
    token = re.search(r'name="form_token" value="([^"]+)"', page.body).group(1)
    assert browser.go("/logout", {"form_token": "forged"}).status == 403
    assert browser.go("/audit").status == 200  # still logged in
    assert browser.go("/logout").status == 200  # a page asking to confirm
    reply = browser.go("/logout", {"form_token": token})
    assert (reply.status, reply.header("Location")) == (303, "/login")
    assert browser.go("/audit").status == 302


def test_a_post_anywhere_else_is_turned_away_before_it_is_refused(gated):
    browser = Browser(gated())
    assert browser.go("/audit", {}).status == 302
    browser.log_in("alice", "alice-password")
    assert browser.go("/audit", {}).status == 405

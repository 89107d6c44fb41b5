"""The login of ``dagrun web`` off loopback, over real HTTP: the real CLI in a subprocess bound
to 0.0.0.0 (reached at 127.0.0.1, which off loopback must log in like any client), accounts
and tokens made with ``dagrun users``, and what the audit trail records."""

from __future__ import annotations

import http.client
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode

import pytest

from tests.helpers import cli_json, db_rows, run_cli, start_cli, stop_process, wait_until

PASSWORD = "s3cret-enough"
SERVING = re.compile(r"serving http://(\S+?):(\d+)/")


@dataclass
class Reply:
    status: int
    headers: http.client.HTTPMessage
    body: str

    def cookies(self) -> dict[str, str]:
        """Each Set-Cookie header by the name of its cookie."""
        return {v.split("=", 1)[0]: v for v in self.headers.get_all("Set-Cookie") or []}

    def json(self):
        return json.loads(self.body)


@dataclass
class Client:
    """A browser in the small: keeps the cookies it is given, follows no redirect."""

    port: int
    jar: dict[str, str] = field(default_factory=dict)

    def go(self, path: str, form: dict | None = None, **headers: str) -> Reply:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        sent = {k.replace("_", "-"): v for k, v in headers.items()}
        if self.jar:
            sent["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.jar.items())
        body = None
        if form is not None:
            body = urlencode(form)
            sent["Content-Type"] = "application/x-www-form-urlencoded"
        try:
            connection.request("POST" if form is not None else "GET", path, body, sent)
            response = connection.getresponse()
            reply = Reply(response.status, response.headers, response.read().decode())
        finally:
            connection.close()
        for name, header in reply.cookies().items():
            if "Max-Age=0" in header:
                self.jar.pop(name, None)
            else:
                self.jar[name] = header.split(";", 1)[0].split("=", 1)[1]
        return reply

    def log_in(self, name: str, password: str, next_: str = "/") -> Reply:
        form = self.go(f"/login?next={next_}")
        assert form.status == 200, form.body
        token = re.search(r'name="form_token" value="([^"]+)"', form.body).group(1)
        sent = {"form_token": token, "name": name, "password": password, "next": next_}
        return self.go("/login", sent)


@dataclass
class Web:
    process: object
    host: str
    port: int
    log: Path

    def client(self) -> Client:
        return Client(self.port)


@pytest.fixture
def env(cli_env, db_url) -> dict[str, str]:
    """The CLI's environment on SQLite and on PostgreSQL."""
    return {**cli_env, "DAGRUN_DB_URL": db_url}


@pytest.fixture
def web(tmp_path) -> Iterator[Callable[..., Web]]:
    """Start ``dagrun web --port 0 ARGS``; stopped with SIGTERM at the end (exit 0)."""
    started = []

    def start(env: dict[str, str], *args: str) -> Web:
        log = tmp_path / f"web-{len(started)}.log"
        process = start_cli("web", "--port", "0", *args, env=env, log=log)
        started.append(process)

        def serving():
            if process.poll() is not None:
                raise AssertionError(f"dagrun web exited {process.returncode}: {log.read_text()}")
            return SERVING.search(log.read_text())

        found = wait_until(serving, timeout=60, what="dagrun web to serve")
        return Web(process, found.group(1), int(found.group(2)), log)

    yield start
    assert [stop_process(p, timeout=20) for p in started] == [0] * len(started)


def add_user(env: dict[str, str], name: str, password: str = PASSWORD) -> None:
    result = run_cli("users", "add", name, env=env, input=f"{password}\n")
    assert result.returncode == 0, result.stderr


def audit_actions(env: dict[str, str]) -> list[tuple[str, str]]:
    """(action, actor) of the audit trail, oldest first."""
    return db_rows(env, "SELECT action, actor FROM audit_log ORDER BY id")


@pytest.mark.slow
def test_off_loopback_it_refuses_to_start_without_an_account(env):
    result = run_cli("web", "--host", "0.0.0.0", "--port", "0", env=env, timeout=60)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr
    assert "is not a loopback address and the store has no account" in result.stderr
    assert "`dagrun users add NAME`" in result.stderr and "--no-auth" in result.stderr


@pytest.mark.slow
def test_no_auth_serves_off_loopback_without_a_login_and_warns_at_every_start(cli_env, web):
    for _ in range(2):
        served = web(cli_env, "--host", "0.0.0.0", "--no-auth")
        assert "warning: --no-auth: 0.0.0.0:" in served.log.read_text()
        assert served.client().go("/audit").status == 200


@pytest.mark.slow
def test_on_loopback_nobody_logs_in_even_when_accounts_exist(cli_env, web):
    add_user(cli_env, "alice")
    served = web(cli_env)
    assert served.host == "127.0.0.1"
    client = served.client()
    assert client.go("/audit").status == 200
    assert client.go("/api/dags").status == 200
    assert client.go("/login").status == 404  # no login form: there is no login
    assert "warning" not in served.log.read_text()


@pytest.mark.slow
def test_off_loopback_pages_go_to_the_login_form_and_the_api_answers_401(env, web):
    add_user(env, "alice")
    served = web(env, "--host", "0.0.0.0")
    assert "login required" in served.log.read_text()
    client = served.client()
    page = client.go("/dags/shop/grid?refresh=0")
    assert page.status == 302
    assert page.headers["Location"] == "/login?next=/dags/shop/grid%3Frefresh%3D0"
    for path in ("/api/dags", "/api/audit", "/metrics"):
        api = client.go(path)
        assert api.status == 401, path
        assert api.headers["WWW-Authenticate"] == 'Bearer realm="dagrun"'
        assert api.json()["status"] == 401 and "Authorization: Bearer" in api.json()["error"]
    assert client.go("/healthz").status == 200
    assert client.go("/login").status == 200
    assert client.go("/static/dagrun.css").status == 200
    assert client.go("/health").status != 302  # the probe needs no login


@pytest.mark.slow
def test_a_login_sets_a_strict_http_only_cookie_that_opens_pages_and_the_api(env, web):
    add_user(env, "alice")
    served = web(env, "--host", "0.0.0.0")
    client = served.client()
    reply = client.log_in("alice", PASSWORD, "/audit")
    assert reply.status == 303 and reply.headers["Location"] == "/audit"
    cookie = reply.cookies()["dagrun_session"]
    assert re.fullmatch(
        r"dagrun_session=[\w.-]+; Path=/; Max-Age=43200; HttpOnly; SameSite=Strict", cookie
    )
    page = client.go("/audit")
    assert page.status == 200 and ">alice<" in page.body and 'action="/logout"' in page.body
    assert client.go("/api/dags").status == 200
    assert ("login", "alice@127.0.0.1") in audit_actions(env)


@pytest.mark.slow
def test_a_wrong_password_or_name_fails_alike_and_is_audited(env, web):
    add_user(env, "alice")
    served = web(env, "--host", "0.0.0.0")
    client = served.client()
    for name, password in (("alice", "wrong-password"), ("mallory", PASSWORD)):
        reply = client.log_in(name, password)
        assert reply.status == 403
        assert "wrong name or password" in reply.body
        assert "dagrun_session" not in reply.cookies()
    assert client.go("/audit").status == 302
    assert audit_actions(env)[-2:] == [
        ("login_failed", "alice@127.0.0.1"),
        ("login_failed", "mallory@127.0.0.1"),
    ]


@pytest.mark.slow
def test_a_logout_ends_the_session_and_is_audited(env, web):
    add_user(env, "alice")
    client = web(env, "--host", "0.0.0.0").client()
    client.log_in("alice", PASSWORD)
    page = client.go("/audit")
    token = re.search(r'name="form_token" value="([^"]+)"', page.body).group(1)
    session = client.jar["dagrun_session"]
    reply = client.go("/logout", {"form_token": token})
    assert reply.status == 303 and reply.headers["Location"] == "/login"
    assert reply.cookies()["dagrun_session"].startswith("dagrun_session=; Path=/; Max-Age=0")
    assert client.go("/audit").status == 302
    assert audit_actions(env)[-1] == ("logout", "alice@127.0.0.1")
    client.jar["dagrun_session"] = session  # a copy kept lasts until it expires, as documented
    assert client.go("/audit").status == 200


@pytest.mark.slow
def test_a_bearer_token_opens_the_api_until_it_is_revoked(env, web):
    add_user(env, "alice")
    made = run_cli("users", "token", "alice", env=env)
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    assert "not shown again" in made.stderr and token not in made.stderr
    client = web(env, "--host", "0.0.0.0").client()
    bearer = {"Authorization": f"Bearer {token}"}
    assert client.go("/api/dags", **bearer).status == 200
    assert client.go("/metrics", **bearer).status == 200
    assert cli_json("users", "list", env=env)[0]["token_used_at"] is not None
    unknown = client.go("/api/dags", Authorization="Bearer not-a-token")
    assert unknown.status == 401
    assert unknown.headers["WWW-Authenticate"] == 'Bearer realm="dagrun", error="invalid_token"'
    assert client.go("/api/dags", Authorization=f"Basic {token}").status == 401
    assert run_cli("users", "revoke", "alice", env=env).returncode == 0
    assert client.go("/api/dags", **bearer).status == 401


@pytest.mark.slow
def test_repeated_failures_from_one_address_are_slowed_down(cli_env, web):
    add_user(cli_env, "alice")
    client = web(cli_env, "--host", "0.0.0.0").client()
    assert [client.log_in("alice", "wrong-password").status for _ in range(5)] == [403] * 5
    refused = client.log_in("alice", PASSWORD)  # even the right password must wait
    assert refused.status == 429
    assert int(refused.headers["Retry-After"]) >= 1
    assert "too many failed logins from 127.0.0.1" in refused.body
    assert "dagrun_session" not in refused.cookies()
    failures = [a for a in audit_actions(cli_env) if a[0] == "login_failed"]
    assert len(failures) == 5  # a refused try checks no password and writes nothing
    wait_until(
        lambda: client.log_in("alice", PASSWORD).status == 303,
        timeout=10,
        interval=0.5,
        what="the 2 s wait to end",
    )

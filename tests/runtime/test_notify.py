"""Notifiers (dagrun.runtime.notify) against a real HTTP server, a real SMTP server and real
processes: the payload's contract, retries and their limits, timeouts, and that a header's
secret or the SMTP password never shows."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import dagrun
from dagrun.errors import NotifyError
from dagrun.runtime import notify, smtp
from dagrun.runtime.environment import environment_secrets
from tests.helpers import process_gone, wait_until
from tests.mailserver import Mailbox, mail_server

DAY = datetime(2026, 1, 5, tzinfo=UTC)
SECRET = "s3cret-token-4f9a"
HEADERS = {"Authorization": f"Bearer {SECRET}", "X-Team": "data"}


def context(**changes: Any) -> dict[str, Any]:
    """A task_failure context, as the worker hands it to a callback."""
    names = {
        "event": "task_failure",
        "dag_id": "etl",
        "run_id": "scheduled__2026-01-05T00:00:00+00:00",
        "task_id": "load",
        "map_index": -1,
        "logical_date": DAY,
        "try_number": 2,
        "state": "failed",
        "exception": "ValueError: bad row 7",
        "ds": "2026-01-05",
        "ds_nodash": "20260105",
        "data_interval_start": DAY,
        "data_interval_end": DAY + timedelta(days=1),
        "params": {},
        "conf": {},
    }
    names.update(changes)
    return names


def run_context(**changes: Any) -> dict[str, Any]:
    return context(event="run_failure", task_id=None, try_number=None, exception=None, **changes)


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class Hook:
    """The server's script and record: it answers ``statuses`` in turn (the last one
    repeats), first waiting ``hang`` seconds unless the test is over."""

    url: str
    statuses: list[int] = field(default_factory=lambda: [200])
    hang: float = 0.0
    received: list[Received] = field(default_factory=list)
    over: threading.Event = field(default_factory=threading.Event)


class _Server(ThreadingHTTPServer):
    daemon_threads = False  # server_close() joins every handler: none outlives its test


def _handler(hook: Hook) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            hook.received.append(Received(self.path, dict(self.headers), body))
            if hook.hang and hook.over.wait(hook.hang):
                return
            status = hook.statuses[min(len(hook.received), len(hook.statuses)) - 1]
            self.send_response(status)
            if 300 <= status < 400:
                self.send_header("Location", "/elsewhere")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture
def hook() -> Iterator[Hook]:
    state = Hook(url="")
    server = _Server(("127.0.0.1", 0), _handler(state))
    state.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield state
    state.over.set()
    server.shutdown()
    server.server_close()
    thread.join(5)
    assert not thread.is_alive()


def test_webhook_posts_the_contracted_payload_and_headers(hook: Hook) -> None:
    notify.webhook(hook.url, headers=HEADERS)(context())

    [received] = hook.received
    assert received.path == "/hook"
    assert received.body == {
        "event": "task_failure",
        "dag_id": "etl",
        "run_id": "scheduled__2026-01-05T00:00:00+00:00",
        "task_id": "load",
        "map_index": -1,
        "logical_date": "2026-01-05T00:00:00+00:00",
        "try_number": 2,
        "state": "failed",
        "error": "ValueError: bad row 7",
    }
    assert received.headers["Authorization"] == f"Bearer {SECRET}"
    assert received.headers["X-Team"] == "data"
    assert received.headers["Content-Type"] == "application/json"
    assert received.headers["User-Agent"] == f"dagrun/{dagrun.__version__}"


@pytest.mark.parametrize(
    ("changes", "posted"),
    [
        ({}, None),
        ({"url": ""}, None),
        ({"url": "http://dagrun.local/dags/etl"}, "http://dagrun.local/dags/etl"),
    ],
)
def test_webhook_posts_the_url_only_when_the_context_has_one(
    hook: Hook, changes: dict[str, str], posted: str | None
) -> None:
    notify.webhook(hook.url)(run_context(**changes))

    [received] = hook.received
    assert received.body.get("url") == posted
    assert ("url" in received.body) == (posted is not None)
    assert received.body["task_id"] is None
    assert received.body["try_number"] is None
    assert received.body["error"] is None


@pytest.mark.parametrize("status", [500, 429])
def test_webhook_tries_a_transient_failure_again(
    hook: Hook, status: int, caplog: pytest.LogCaptureFixture
) -> None:
    hook.statuses = [status, 200]
    caplog.set_level(logging.INFO, logger="dagrun.notify")

    notify.webhook(hook.url, retries=1)(context())

    assert len(hook.received) == 2
    assert f"webhook task_failure to {hook.url}: HTTP 200" in caplog.messages


def test_webhook_fails_after_its_retries_without_the_secrets(hook: Hook) -> None:
    hook.statuses = [503]

    with pytest.raises(NotifyError) as failed:
        notify.webhook(f"{hook.url}?token=q-{SECRET}", headers=HEADERS, retries=2)(context())

    assert len(hook.received) == 3
    assert hook.received[0].path == f"/hook?token=q-{SECRET}"
    assert str(failed.value) == f"webhook task_failure to {hook.url}: HTTP 503 after 3 tries"


@pytest.mark.parametrize("status", [404, 302])
def test_webhook_fails_at_once_on_a_status_it_cannot_fix(hook: Hook, status: int) -> None:
    hook.statuses = [status, 200]

    with pytest.raises(NotifyError, match=rf"HTTP {status} after 1 try$"):
        notify.webhook(hook.url, retries=2)(context())

    assert len(hook.received) == 1  # a redirect is not followed


def test_webhook_fails_when_nothing_listens() -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]

    with pytest.raises(NotifyError, match=r"ConnectionRefusedError: .* after 2 tries$"):
        notify.webhook(f"http://127.0.0.1:{port}/hook", retries=1)(context())


def test_webhook_gives_up_on_a_server_that_does_not_answer(hook: Hook) -> None:
    hook.hang = 2.0
    started = time.monotonic()

    with pytest.raises(NotifyError, match=r": no answer within 0.5 s after 1 try$"):
        notify.webhook(hook.url, timeout=0.5, retries=0)(context())

    assert time.monotonic() - started < 1.5
    assert len(hook.received) == 1


def test_webhook_logs_no_secret(
    hook: Hook, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    hook.statuses = [500, 200, 403]
    caplog.set_level(logging.DEBUG)
    send = notify.webhook(f"{hook.url}?token=q-{SECRET}", headers=HEADERS, retries=1)

    send(context())
    with pytest.raises(NotifyError) as failed:
        send(context())

    assert len(hook.received) == 3
    assert [r.levelname for r in caplog.records if r.name == "dagrun.notify"] == [
        "WARNING",
        "INFO",
    ]
    captured = capsys.readouterr()
    for text in (caplog.text, captured.out, captured.err, str(failed.value), repr(send)):
        assert SECRET not in text


def test_webhook_shows_only_scheme_host_and_path() -> None:
    send = notify.webhook("https://hooks.example/x/y?token=abc#frag", headers=HEADERS)

    assert repr(send) == "webhook('https://hooks.example/x/y')"
    assert send.__qualname__ == repr(send)


@pytest.mark.parametrize(
    ("args", "kwargs", "complaint"),
    [
        ((42,), {}, "url must be a str, not int"),
        (("ftp://hooks.example/x",), {}, "http:// or https://"),
        (("hooks.example/x",), {}, "http:// or https://"),
        (("http:///x",), {}, "name a host"),
        (("http://hooks.example:99999/x",), {}, "name a host"),
        ((f"https://user:{SECRET}@hooks.example/x",), {}, "must not hold a user or password"),
        (("https://h.example",), {"headers": ["Authorization"]}, "mapping of str to str"),
        (("https://h.example",), {"headers": {"Authorization": 7}}, "'Authorization' must be"),
        (("https://h.example",), {"headers": {b"Authorization": SECRET}}, "names must be str"),
        (("https://h.example",), {"headers": {"Bad Name": SECRET}}, "not an HTTP token"),
        (("https://h.example",), {"headers": {"Authorization": f"{SECRET}\r\nX: y"}}, "line"),
        (("https://h.example",), {"headers": {"Authorization": f"{SECRET}\u2019"}}, "Latin-1"),
        (("https://h.example",), {"timeout": 0}, "timeout must be a positive number"),
        (("https://h.example",), {"timeout": "5"}, "timeout must be a positive number"),
        (("https://h.example",), {"timeout": float("nan")}, "timeout must be a positive number"),
        (("https://h.example",), {"retries": -1}, "retries must be an int >= 0"),
        (("https://h.example",), {"retries": True}, "retries must be an int >= 0"),
    ],
)
def test_webhook_rejects_bad_arguments_when_made(
    args: tuple[Any, ...], kwargs: dict[str, Any], complaint: str
) -> None:
    with pytest.raises(NotifyError, match=complaint) as failed:
        notify.webhook(*args, **kwargs)

    assert SECRET not in str(failed.value)
    assert "\n" not in str(failed.value)


def test_command_renders_the_context(tmp_path: Path) -> None:
    out = tmp_path / "out"

    notify.command(f"echo '{{{{ dag_id }}}}: {{{{ exception }}}}' > {shlex.quote(str(out))}")(
        context()
    )

    assert out.read_text() == "etl: ValueError: bad row 7\n"


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        (
            context(),
            "task_failure|etl|load|scheduled__2026-01-05T00:00:00+00:00|2026-01-05|2|"
            "ValueError: bad row 7|extra",
        ),
        (run_context(), "run_failure|etl||scheduled__2026-01-05T00:00:00+00:00|2026-01-05|||extra"),
    ],
)
def test_command_sees_the_event_in_its_environment(
    tmp_path: Path, event: dict[str, Any], expected: str
) -> None:
    out = tmp_path / "out"
    script = (
        'echo "$DAGRUN_EVENT|$DAG_ID|$TASK_ID|$RUN_ID|$DS|$TRY_NUMBER|$DAGRUN_ERROR|$EXTRA"'
        f" > {shlex.quote(str(out))}"
    )

    notify.command(script, env={"EXTRA": "extra"})(event)

    assert out.read_text() == expected + "\n"


@pytest.mark.parametrize(
    ("script", "complaint"),
    [("exit 3", "exited with code 3"), ("kill -TERM $$", r"killed by signal 15 \(SIGTERM\)")],
)
def test_command_fails_when_it_fails(script: str, complaint: str) -> None:
    with pytest.raises(NotifyError, match=complaint):
        notify.command(script)(context())


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_command_timeout_kills_its_process_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "background.pid"
    started = time.monotonic()

    with pytest.raises(NotifyError, match=r"timed out after 0.5 s$"):
        notify.command(f"sleep 30 & echo $! > {shlex.quote(str(pid_file))}; sleep 30", timeout=0.5)(
            context()
        )

    assert time.monotonic() - started < 5
    pid = int(pid_file.read_text())
    try:
        wait_until(lambda: process_gone(pid), 5, what="the background sleep to be killed")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_command_fails_on_an_undefined_name() -> None:
    with pytest.raises(NotifyError, match="'nope' is undefined"):
        notify.command("echo {{ nope }}")(context())


def test_command_shows_its_first_line() -> None:
    send = notify.command("echo hi\necho more")

    assert repr(send) == "command('echo hi')"
    assert send.__qualname__ == repr(send)


@pytest.mark.parametrize(
    ("args", "kwargs", "complaint"),
    [
        (("",), {}, "non-empty str"),
        (("  \n",), {}, "non-empty str"),
        ((["echo", "hi"],), {}, "non-empty str"),
        (("echo hi",), {"timeout": -1}, "timeout must be a positive number"),
        (("echo hi",), {"env": {"A=B": "x"}}, "not a valid environment variable"),
        (("echo hi",), {"env": {"A": 1}}, "'A' must be a str"),
    ],
)
def test_command_rejects_bad_arguments_when_made(
    args: tuple[Any, ...], kwargs: dict[str, Any], complaint: str
) -> None:
    with pytest.raises(NotifyError, match=complaint):
        notify.command(*args, **kwargs)


# ---------------------------------------------------------------- email, to a real SMTP server

SMTP_PASSWORD = "smtp-Pa55word-9c1e"


@pytest.fixture
def mailbox(monkeypatch: pytest.MonkeyPatch) -> Iterator[Mailbox]:
    """A loopback SMTP server, and this process's environment sending mail to it."""
    with mail_server() as box:
        for name, value in box.env().items():
            monkeypatch.setenv(name, value)
        yield box


def test_email_sends_the_event_to_every_recipient(mailbox: Mailbox) -> None:
    send = notify.email("ops@example.com; data@example.com", cc=["lead@example.com"])

    send(context(map_index=3, url="http://dagrun.local/log"))

    [mail] = mailbox.received
    assert mail.sender == "dagrun@example.org"
    assert mail.recipients == ["ops@example.com", "data@example.com", "lead@example.com"]
    message = mail.message
    assert message["From"] == "dagrun@example.org"
    assert message["To"] == "ops@example.com, data@example.com"
    assert message["Cc"] == "lead@example.com"
    assert message["Subject"] == "[dagrun] etl.load[3] failed on 2026-01-05 (try 2)"
    assert message.get_content().splitlines() == [
        "event: task_failure",
        "dag_id: etl",
        "task_id: load",
        "map_index: 3",
        "run_id: scheduled__2026-01-05T00:00:00+00:00",
        "logical_date: 2026-01-05T00:00:00+00:00",
        "try_number: 2",
        "state: failed",
        "error: ValueError: bad row 7",
        "url: http://dagrun.local/log",
    ]
    assert message["Message-ID"].endswith("@example.org>") and message["Date"]


def test_email_of_a_run_names_the_dag(mailbox: Mailbox) -> None:
    notify.email("ops@example.com")(run_context())

    [mail] = mailbox.received
    assert mail.message["Subject"] == "[dagrun] etl failed on 2026-01-05"
    assert "task_id" not in mail.message.get_content()


def test_email_renders_its_subject_and_body_on_one_subject_line(mailbox: Mailbox) -> None:
    send = notify.email(
        "ops@example.com",
        subject="{{ dag_id }} broke: {{ exception }}",
        body="Day {{ ds }}, try {{ try_number }}.",
    )

    send(context(exception="bad row\nBcc: evil@example.net"))

    [mail] = mailbox.received
    assert mail.message["Subject"] == "etl broke: bad row Bcc: evil@example.net"
    assert mail.message["Bcc"] is None and mail.recipients == ["ops@example.com"]
    assert mail.message.get_content().strip() == "Day 2026-01-05, try 2."


def test_email_fails_on_an_undefined_name(mailbox: Mailbox) -> None:
    with pytest.raises(NotifyError, match=r"email.*undefined"):
        notify.email("ops@example.com", subject="{{ nope }}")(context())

    assert mailbox.received == []


def test_email_logs_in_and_never_shows_the_password(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with mail_server(accounts={"etl": SMTP_PASSWORD}) as box:
        for name, value in box.env(DAGRUN_SMTP_USER="etl").items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("DAGRUN_SMTP_PASSWORD", SMTP_PASSWORD)
        notify.email("ops@example.com")(context())
        monkeypatch.setenv("DAGRUN_SMTP_PASSWORD", "wrong-password")
        with pytest.raises(NotifyError, match=r"SMTPAuthenticationError: 535") as refused:
            notify.email("ops@example.com")(context())

    assert box.logins[0] == ("etl", SMTP_PASSWORD) and len(box.logins) > 1  # PLAIN, LOGIN
    assert set(box.logins[1:]) == {("etl", "wrong-password")}
    assert len(box.received) == 1
    ours = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("dagrun"))
    assert "email task_failure to ops@example.com via 127.0.0.1" in ours
    for text in (ours, str(refused.value), repr(smtp.smtp_settings())):
        assert SMTP_PASSWORD not in text and "wrong-password" not in text


def test_the_smtp_password_is_a_secret_of_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DAGRUN_SMTP_PASSWORD", SMTP_PASSWORD)

    assert SMTP_PASSWORD in environment_secrets()


def test_email_with_starttls_sends_nothing_to_a_server_without_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with mail_server(accounts={"etl": SMTP_PASSWORD}) as box:
        for name, value in box.env(DAGRUN_SMTP_USER="etl").items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("DAGRUN_SMTP_PASSWORD", SMTP_PASSWORD)
        monkeypatch.delenv("DAGRUN_SMTP_STARTTLS")  # the default: true
        with pytest.raises(NotifyError, match="STARTTLS extension not supported"):
            notify.email("ops@example.com")(context())

    assert box.logins == [] and box.received == []


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl to make a certificate")
def test_email_with_starttls_verifies_the_server_and_sends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    request = "req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1"
    names = "subjectAltName=IP:127.0.0.1"
    subprocess.run(
        ["openssl", *request.split(), "-keyout", str(key), "-out", str(cert), "-addext", names],
        check=True,
        capture_output=True,
    )
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)
    with mail_server(accounts={"etl": SMTP_PASSWORD}, tls=tls) as box:
        for name, value in box.env(DAGRUN_SMTP_USER="etl", DAGRUN_SMTP_STARTTLS="true").items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("DAGRUN_SMTP_PASSWORD", SMTP_PASSWORD)
        with pytest.raises(NotifyError, match="CERTIFICATE_VERIFY_FAILED"):
            notify.email("ops@example.com")(context())  # not trusted yet
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        notify.email("ops@example.com")(context())

    assert box.logins == [("etl", SMTP_PASSWORD)] and len(box.received) == 1


def test_email_fails_without_a_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DAGRUN_SMTP_HOST", raising=False)
    with pytest.raises(NotifyError, match=r"no SMTP server is configured \(DAGRUN_SMTP_HOST\)"):
        notify.email("ops@example.com")(context())

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    monkeypatch.setenv("DAGRUN_SMTP_HOST", "127.0.0.1")
    monkeypatch.setenv("DAGRUN_SMTP_PORT", str(port))
    with pytest.raises(NotifyError, match=rf"SMTP 127.0.0.1:{port}: ConnectionRefusedError"):
        notify.email("ops@example.com")(context())


def test_email_gives_up_on_a_server_that_does_not_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as silent:  # connections queue up; nobody greets them
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        monkeypatch.setenv("DAGRUN_SMTP_HOST", "127.0.0.1")
        monkeypatch.setenv("DAGRUN_SMTP_PORT", str(silent.getsockname()[1]))
        monkeypatch.setenv("DAGRUN_SMTP_STARTTLS", "false")
        started = time.monotonic()
        with pytest.raises(NotifyError, match=r"no answer within 0.5 s$"):
            notify.email("ops@example.com", timeout=0.5)(context())

    assert time.monotonic() - started < 2


@pytest.mark.parametrize(
    ("variable", "value", "complaint"),
    [
        ("DAGRUN_SMTP_PORT", "smtp", "DAGRUN_SMTP_PORT: smtp.port: must be a whole number"),
        ("DAGRUN_SMTP_PORT", "70000", "smtp.port must be a port number, not 70000"),
        ("DAGRUN_SMTP_STARTTLS", "maybe", "DAGRUN_SMTP_STARTTLS: smtp.starttls: must be true"),
    ],
)
def test_bad_smtp_settings_name_their_variable(variable: str, value: str, complaint: str) -> None:
    with pytest.raises(NotifyError, match=complaint):
        smtp.smtp_settings({"DAGRUN_SMTP_HOST": "mail.example.com", variable: value})


def test_smtp_settings_defaults() -> None:
    settings = smtp.smtp_settings({"DAGRUN_SMTP_HOST": " mail.example.com "})

    assert (settings.host, settings.port, settings.starttls) == ("mail.example.com", 25, True)
    assert settings.user is None and settings.password is None
    assert settings.sender.startswith("dagrun@")
    assert smtp.smtp_settings({}).host is None


@pytest.mark.parametrize(
    ("args", "kwargs", "complaint"),
    [
        ((None,), {}, "must be an address or a list of them"),
        (("",), {}, "names no address"),
        ((" ; ",), {}, "names no address"),
        (("ops",), {}, "'ops' is not an email address"),
        ((["ops@example.com", 3],), {}, "must be an address or a list"),
        (("ops@example.com\nBcc: x@example.net",), {}, "is not an email address"),
        (("Ops <ops@example.com>",), {}, "is not an email address"),
        (("ops@example.com",), {"cc": "nobody"}, "email cc: 'nobody'"),
        (("ops@example.com",), {"subject": ""}, "subject must be a non-empty str"),
        (("ops@example.com",), {"body": 3}, "body must be a non-empty str"),
        (("ops@example.com",), {"timeout": 0}, "timeout must be a positive number"),
    ],
)
def test_email_rejects_bad_arguments_when_made(
    args: tuple[Any, ...], kwargs: dict[str, Any], complaint: str
) -> None:
    with pytest.raises(NotifyError, match=complaint):
        notify.email(*args, **kwargs)


def test_email_shows_its_recipients() -> None:
    assert repr(notify.email("ops@example.com,data@example.com")) == (
        "email('ops@example.com, data@example.com')"
    )

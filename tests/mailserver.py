"""A real SMTP server on loopback for the tests of mail (aiosmtpd, in a thread of the test
process): it keeps every message it accepts and every login it was given."""

from __future__ import annotations

import contextlib
import email
import email.policy
import ssl
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.message import EmailMessage
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword


@dataclass
class Received:
    """One message as the server got it: the envelope and the parsed message."""

    sender: str
    recipients: list[str]
    message: EmailMessage


@dataclass
class Mailbox:
    """What the server saw; ``port`` is where it listens on 127.0.0.1."""

    port: int = 0
    received: list[Received] = field(default_factory=list)
    logins: list[tuple[str, str]] = field(default_factory=list)
    accounts: dict[str, str] = field(default_factory=dict)

    def env(self, **more: str) -> dict[str, str]:
        """The environment that sends mail here (no TLS unless ``more`` says so)."""
        return {
            "DAGRUN_SMTP_HOST": "127.0.0.1",
            "DAGRUN_SMTP_PORT": str(self.port),
            "DAGRUN_SMTP_STARTTLS": "false",
            "DAGRUN_SMTP_FROM": "dagrun@example.org",
            **more,
        }


class _Handler:
    def __init__(self, box: Mailbox):
        self.box = box

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        assert isinstance(message, EmailMessage)
        self.box.received.append(Received(envelope.mail_from, list(envelope.rcpt_tos), message))
        return "250 OK"


class _Controller(Controller):
    """aiosmtpd's controller on a port the system picks (its own check connects to the
    port it was given, so the port is read from the socket first)."""

    def _trigger_server(self) -> None:
        assert self.server is not None
        self.port = self.server.sockets[0].getsockname()[1]
        super()._trigger_server()


@contextlib.contextmanager
def mail_server(
    accounts: dict[str, str] | None = None, tls: ssl.SSLContext | None = None
) -> Iterator[Mailbox]:
    """A server on 127.0.0.1; with ``accounts`` it offers AUTH (LOGIN and PLAIN) and takes
    those logins, with ``tls`` it offers STARTTLS."""
    box = Mailbox(accounts=dict(accounts or {}))

    def authenticate(server: Any, session: Any, envelope: Any, mechanism: str, data: Any):
        if not isinstance(data, LoginPassword):
            return AuthResult(success=False, handled=False)
        login, password = data.login.decode(), data.password.decode()
        box.logins.append((login, password))
        return AuthResult(success=box.accounts.get(login) == password, handled=False)

    options: dict[str, Any] = {"tls_context": tls} if tls else {}
    if accounts is not None:
        options.update(authenticator=authenticate, auth_require_tls=False)
    controller = _Controller(_Handler(box), hostname="127.0.0.1", port=0, **options)
    controller.start()
    box.port = controller.port
    try:
        yield box
    finally:
        controller.stop()

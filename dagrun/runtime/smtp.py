"""The SMTP server mail is sent through, and sending one message to it.

The server is configured by environment variables, read in one place (``smtp_settings``) so
that a configuration file can take them over: ``DAGRUN_SMTP_HOST`` (no host, no mail),
``DAGRUN_SMTP_PORT`` (25), ``DAGRUN_SMTP_USER`` and ``DAGRUN_SMTP_PASSWORD`` (to log in),
``DAGRUN_SMTP_STARTTLS`` (true: the connection is upgraded to TLS before anything else is
said, and the server's certificate must verify, as a browser's would), ``DAGRUN_SMTP_FROM``
(``dagrun@<this host's name>``). The password is a secret: no log line, error or ``repr``
holds it, and attempt and callback logs mask it (``environment.environment_secrets``).
A leaf of the runtime, cheap to import: a DAG file's parse may read the settings.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dagrun.errors import NotifyError

if TYPE_CHECKING:
    from email.message import EmailMessage

log = logging.getLogger("dagrun.notify")

HOST = "DAGRUN_SMTP_HOST"
#: A secret: ``environment.environment_secrets`` names it for masking.
PASSWORD = "DAGRUN_SMTP_PASSWORD"
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


@dataclass(frozen=True)
class SmtpSettings:
    """Where mail goes and how to log in there; ``host`` None when no server is set."""

    host: str | None
    port: int = 25
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    starttls: bool = True
    sender: str = ""

    @property
    def shown(self) -> str:
        return f"{self.host}:{self.port}"


def smtp_settings(environ: Mapping[str, str] | None = None) -> SmtpSettings:
    """The SMTP settings of this process's environment (or ``environ``); a bad value is a
    ``NotifyError`` naming its variable (never the password's value)."""
    env = os.environ if environ is None else environ
    return SmtpSettings(
        host=env.get(HOST, "").strip() or None,
        port=_port(env.get("DAGRUN_SMTP_PORT", "25")),
        user=env.get("DAGRUN_SMTP_USER") or None,
        password=env.get(PASSWORD) or None,
        starttls=_flag("DAGRUN_SMTP_STARTTLS", env.get("DAGRUN_SMTP_STARTTLS", "true")),
        sender=env.get("DAGRUN_SMTP_FROM") or f"dagrun@{socket.gethostname()}",
    )


def send(
    message: EmailMessage, recipients: Sequence[str], settings: SmtpSettings, timeout: float
) -> None:
    """Hand ``message`` to the server for ``recipients``: STARTTLS first when set, then the
    login when a user is set. ``timeout`` bounds the connection and each reply. What goes
    wrong is a ``NotifyError`` in one line, with the server's reply but never the password."""
    import smtplib
    import ssl

    if settings.host is None:
        raise NotifyError(f"no SMTP server is configured ({HOST})")
    try:
        with smtplib.SMTP(settings.host, settings.port, timeout=timeout) as server:
            if settings.starttls:
                server.starttls(context=ssl.create_default_context())
            if settings.user:
                server.login(settings.user, settings.password or "")
            refused = server.send_message(message, settings.sender, list(recipients))
    except (smtplib.SMTPException, OSError) as exc:
        raise NotifyError(f"SMTP {settings.shown}: {_problem(exc, timeout)}") from None
    if refused:
        log.warning("SMTP %s refused %s", settings.shown, ", ".join(sorted(refused)))


def _problem(exc: BaseException, timeout: float) -> str:
    """What went wrong, in one line: a server's reply as its code and text."""
    import smtplib

    # smtplib turns a timeout while it waits for a reply into "Connection unexpectedly
    # closed: timed out".
    timed_out = isinstance(exc, smtplib.SMTPServerDisconnected) and "timed out" in str(exc)
    if timed_out or isinstance(exc, TimeoutError):
        return f"no answer within {timeout:g} s"
    if isinstance(exc, smtplib.SMTPResponseException):
        text = exc.smtp_error.decode(errors="replace") if isinstance(exc.smtp_error, bytes) else ""
        return f"{type(exc).__name__}: {exc.smtp_code} {' '.join(text.split())}".rstrip()
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def _port(value: str) -> int:
    try:
        port = int(value)
    except ValueError:
        port = 0
    if not 0 < port < 65536:
        raise NotifyError(f"DAGRUN_SMTP_PORT must be a port number, not {value!r}")
    return port


def _flag(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered not in _TRUE | _FALSE:
        raise NotifyError(f"{name} must be true or false, not {value!r}")
    return lowered in _TRUE

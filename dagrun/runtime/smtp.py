"""The SMTP server mail is sent through, and sending one message to it.

The server is configured by the ``[smtp]`` settings (``dagrun.settings``: a variable such as
``DAGRUN_SMTP_HOST`` over ``dagrun.toml``), read in one place (``smtp_settings``): ``host``
(no host, no mail), ``port`` (25), ``user`` and ``password`` (to log in), ``starttls`` (true:
the connection is upgraded to TLS before anything else is said, and the server's
certificate must verify, as a browser's would), ``from`` (``dagrun@<this host's name>``).
The password is a secret: no log line, error or ``repr`` holds it, and attempt and callback
logs mask it (``environment.environment_secrets``). A leaf of the runtime, cheap to import:
a DAG file's parse may read the settings.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dagrun import settings
from dagrun.errors import NotifyError
from dagrun.settings import ConfigError

if TYPE_CHECKING:
    from email.message import EmailMessage

log = logging.getLogger("dagrun.notify")

HOST = "DAGRUN_SMTP_HOST"


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
    """The SMTP settings (``[smtp]`` of dagrun's settings: a variable over the config file);
    ``environ`` stands for this process's environment. A bad value is a ``NotifyError``
    naming where it was set (never the password's value)."""
    try:
        value = {key: settings.get(f"smtp.{key}", environ) for key in _KEYS}
    except ConfigError as exc:
        raise NotifyError(str(exc)) from None
    if not 0 < value["port"] < 65536:
        raise NotifyError(f"smtp.port must be a port number, not {value['port']!r}")
    return SmtpSettings(
        host=value["host"].strip() or None,
        port=value["port"],
        user=value["user"] or None,
        password=value["password"] or None,
        starttls=value["starttls"],
        sender=value["from"] or f"dagrun@{socket.gethostname()}",
    )


_KEYS = ("host", "port", "user", "password", "starttls", "from")


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

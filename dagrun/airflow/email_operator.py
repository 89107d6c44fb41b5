"""Airflow's ``EmailOperator``: a mail through dagrun's SMTP settings (``DAGRUN_SMTP_*``,
``dagrun.runtime.smtp``), its subject, HTML content and recipients templates."""

from __future__ import annotations

import mimetypes
import os
from collections.abc import Sequence
from email.message import EmailMessage
from typing import Any

from dagrun.airflow.models import Context
from dagrun.airflow.operators import BaseOperator
from dagrun.runtime import smtp
from dagrun.runtime.notify import addresses


class EmailOperator(BaseOperator):
    """Sends ``html_content`` under ``subject`` to ``to`` (and ``cc``, ``bcc``), with
    ``files`` attached, when the task runs."""

    template_fields: Sequence[str] = ("to", "subject", "html_content", "files")
    template_fields_renderers = {"html_content": "html"}
    template_ext: Sequence[str] = (".html",)
    ui_color = "#e6faf9"

    def __init__(
        self,
        *,
        to: str | Sequence[str],
        subject: str,
        html_content: str,
        files: Sequence[str] | None = None,
        cc: str | Sequence[str] | None = None,
        bcc: str | Sequence[str] | None = None,
        mime_subtype: str = "mixed",
        mime_charset: str = "utf-8",
        conn_id: str | None = None,
        custom_headers: dict[str, Any] | None = None,
        from_email: str | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.to = to
        self.subject = subject
        self.html_content = html_content
        self.files = list(files or [])
        self.cc, self.bcc = cc, bcc
        self.mime_charset = mime_charset
        self.custom_headers = dict(custom_headers or {})
        self.from_email = from_email

    def execute(self, context: Context) -> None:
        settings = smtp.smtp_settings()
        to = addresses(self.to, "to")
        cc = addresses(self.cc, "cc") if self.cc else []
        bcc = addresses(self.bcc, "bcc") if self.bcc else []
        message = EmailMessage()
        message["From"] = self.from_email or settings.sender
        message["To"] = ", ".join(to)
        if cc:
            message["Cc"] = ", ".join(cc)
        message["Subject"] = " ".join(str(self.subject).split())  # one line: no injection
        for name, value in self.custom_headers.items():
            message[name] = str(value)
        message.set_content(str(self.html_content), subtype="html", charset=self.mime_charset)
        for path in self.files:
            _attach(message, path)
        self.log.info("sending email to %s via %s", ", ".join(to + cc + bcc), settings.shown)
        smtp.send(message, to + cc + bcc, settings, timeout=30.0)


def _attach(message: EmailMessage, path: str) -> None:
    kind, _ = mimetypes.guess_type(path)
    main, sub = (kind or "application/octet-stream").split("/", 1)
    with open(path, "rb") as handle:
        message.add_attachment(
            handle.read(), maintype=main, subtype=sub, filename=os.path.basename(path)
        )

"""Notifiers: ready-made callbacks that tell the outside world of an event.

``on_failure_callback=notify.webhook(url, headers={...})`` POSTs the event as one JSON
object; ``notify.command("...")`` runs a shell command; ``notify.email("ops@example.com")``
mails it through the SMTP server the worker's environment names (``dagrun.runtime.smtp``).
Each is made when the DAG file is parsed, so it checks its arguments then (a bad one is a
:class:`NotifyError` naming it) and imports nothing costly: ``import dagrun`` loads this
module, and every CLI command and parse pays for what it imports. The work happens when a
worker runs the callback, under the callback's time limit; a notifier that cannot deliver
raises :class:`NotifyError`, which the worker records.

Headers carry secrets (bearer tokens), so no header value is ever logged, put in an error
or shown by ``repr``; urls are shown as scheme, host and path, without the userinfo, query
and fragment where tokens also hide.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import re
import sys
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dagrun.errors import NonRetryableError, NotifyError

if TYPE_CHECKING:
    from email.message import EmailMessage
    from urllib.request import OpenerDirector

log = logging.getLogger("dagrun.notify")

#: The first wait before a retry; each later one doubles, up to ``_MAX_BACKOFF``.
_BACKOFF = 0.5
_MAX_BACKOFF = 2.0
#: RFC 9110: a header name is a token; a value is visible Latin-1, spaces and tabs.
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_HEADER_VALUE = re.compile(r"[\t\x20-\x7e\x80-\xff]*")


def webhook(
    url: str,
    headers: Mapping[str, str] | None = None,
    *,
    timeout: float = 5.0,
    retries: int = 2,
) -> Callable[[Mapping[str, Any]], None]:
    """A callback that POSTs the event to ``url`` as JSON: ``event, dag_id, run_id,
    task_id, map_index, logical_date`` (ISO 8601), ``try_number, state, error``, and ``url``
    (the event's page) when the web UI's address is set.

    ``timeout`` bounds each connect and each read. Connection errors, timeouts, HTTP 429
    and 5xx are tried again up to ``retries`` times, after 0.5 s, 1 s, 2 s, 2 s...; any
    other status that is not 2xx fails at once. Redirects are not followed: that would send
    the headers, and their token, wherever the server points."""
    _check_url(url)
    return _Webhook(
        url,
        _check_headers(headers),
        _check_seconds("webhook timeout", timeout),
        _check_retries(retries),
    )


def command(
    command: str, *, timeout: float = 60.0, env: Mapping[str, str] | None = None
) -> Callable[[Mapping[str, Any]], None]:
    """A callback that runs ``command`` with bash, rendered first as a Jinja2 template with
    the context's names (``{{ dag_id }}``, ``{{ exception }}``...). Its environment adds
    ``DAGRUN_EVENT, DAG_ID, TASK_ID, RUN_ID, DS, TRY_NUMBER, DAGRUN_ERROR`` (empty when
    the event has none), then ``env``. Its output goes to the callback's log. A non-zero
    exit fails the callback; so does running past ``timeout``, which kills the command's
    whole process group."""
    if not isinstance(command, str) or not command.strip():
        raise NotifyError(f"command must be a non-empty str, not {command!r}")
    return _Command(command, _check_seconds("command timeout", timeout), _check_env(env))


def email(
    to: str | Sequence[str],
    subject: str | None = None,
    body: str | None = None,
    *,
    cc: str | Sequence[str] | None = None,
    timeout: float = 10.0,
) -> Callable[[Mapping[str, Any]], None]:
    """A callback that mails the event to ``to`` (an address, a list of them, or addresses
    separated by commas or semicolons), and ``cc``, through the SMTP server of the
    environment the callback runs in (``DAGRUN_SMTP_HOST`` and the rest: see
    ``dagrun.runtime.smtp``). ``subject`` and ``body`` are Jinja2 templates rendered with the
    context's names, as ``command``'s; by default the subject names the DAG, the task, its
    state and day, and the body lists the event's fields (``error`` and ``url`` included).
    ``timeout`` bounds the connection and each reply of the server. No server configured,
    a failed login or a server that does not answer fail the callback; nothing is retried
    (a mail relay queues and retries itself)."""
    return _Email(
        addresses(to, "to"),
        addresses(cc, "cc") if cc is not None else [],
        _template(subject, "subject"),
        _template(body, "body"),
        _check_seconds("email timeout", timeout),
    )


class _Webhook:
    """What ``webhook()`` returns: its ``repr`` shows the url and nothing of the headers."""

    def __init__(self, url: str, headers: dict[str, str], timeout: float, retries: int):
        self._url = url
        self._headers = headers
        self._timeout = timeout
        self._retries = retries
        self._shown = _shown(url)
        self.__qualname__ = repr(self)

    def __repr__(self) -> str:
        return f"webhook({self._shown!r})"

    def __call__(self, context: Mapping[str, Any]) -> None:
        from dagrun import __version__

        body = json.dumps(_payload(context)).encode()
        headers = {
            "Content-Type": "application/json",
            "User-Agent": f"dagrun/{__version__}",
            **self._headers,
        }
        event = context["event"]
        for tried in range(1, self._retries + 2):
            status, problem = _post(self._url, body, headers, self._timeout)
            if status is not None and 200 <= status < 300:
                log.info("webhook %s to %s: HTTP %d", event, self._shown, status)
                return
            problem = problem or f"HTTP {status}"
            transient = status is None or status == 429 or status >= 500
            if tried > self._retries or not transient:
                tries = "1 try" if tried == 1 else f"{tried} tries"
                raise NotifyError(f"webhook {event} to {self._shown}: {problem} after {tries}")
            delay = min(_BACKOFF * 2 ** (tried - 1), _MAX_BACKOFF)
            log.warning(
                "webhook %s to %s: %s; trying again in %g s", event, self._shown, problem, delay
            )
            time.sleep(delay)


class _Command:
    """What ``command()`` returns: its ``repr`` shows the command's first line."""

    def __init__(self, command: str, timeout: float, env: dict[str, str]):
        self._command = command
        self._timeout = timeout
        self._env = env
        first = command.strip().splitlines()[0]
        self._shown = first if len(first) <= 60 else first[:57] + "..."
        self.__qualname__ = repr(self)

    def __repr__(self) -> str:
        return f"command({self._shown!r})"

    def __call__(self, context: Mapping[str, Any]) -> None:
        import subprocess

        from dagrun import processes
        from dagrun.runtime import masking

        rendered = self._render(context)
        env = {**os.environ, **_command_environment(context), **self._env}
        log.info("command %s: %s", context["event"], rendered)
        sys.stdout.flush()
        sys.stderr.flush()
        masker = masking.active()  # the callback's output is masked: the command's too
        process = subprocess.Popen(
            ["bash", "-c", rendered],
            env=env,
            preexec_fn=processes.own_session,
            **masking.piped(masker),
        )
        processes.report_group(process.pid)  # killed with the callback's child if need be
        deadline = time.monotonic() + self._timeout
        try:
            if masker:
                masking.pump(process, masker, self._timeout)
            code = process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise NotifyError(f"{self!r} timed out after {self._timeout:g} s") from None
        finally:
            if process.poll() is None:
                processes.kill_group(process.pid)
                process.wait()
            if process.stdout is not None:
                process.stdout.close()
        if code != 0:
            raise NotifyError(f"{self!r} {processes.describe_exit(code)}")

    def _render(self, context: Mapping[str, Any]) -> str:
        """The command rendered; the renderer (and Jinja2) only now, as parsing need neither."""
        from dagrun.runtime.rendering import render

        try:
            return render(self._command, dict(context))
        except NonRetryableError as exc:
            raise NotifyError(f"{self!r}: {exc}") from None


class _Email:
    """What ``email()`` returns: its ``repr`` shows the recipients."""

    def __init__(
        self,
        to: list[str],
        cc: list[str],
        subject: str | None,
        body: str | None,
        timeout: float,
    ):
        self._to = to
        self._cc = cc
        self._subject = subject
        self._body = body
        self._timeout = timeout
        self.__qualname__ = repr(self)

    def __repr__(self) -> str:
        return f"email({', '.join(self._to)!r})"

    def __call__(self, context: Mapping[str, Any]) -> None:
        from dagrun.runtime import smtp

        settings = smtp.smtp_settings()
        message = self._message(context, settings.sender)
        event = context["event"]
        log.info("email %s to %s via %s", event, ", ".join(self._to + self._cc), settings.shown)
        try:
            smtp.send(message, self._to + self._cc, settings, self._timeout)
        except NotifyError as exc:
            raise NotifyError(f"{self!r} {event}: {exc}") from None

    def _message(self, context: Mapping[str, Any], sender: str) -> EmailMessage:
        from email.message import EmailMessage
        from email.utils import formatdate, make_msgid

        subject = self._render(self._subject, context) if self._subject else _subject(context)
        message = EmailMessage()
        message["From"] = sender
        message["To"] = ", ".join(self._to)
        if self._cc:
            message["Cc"] = ", ".join(self._cc)
        message["Subject"] = " ".join(subject.split())  # one line: no header injection
        message["Date"] = formatdate(localtime=True)
        message["Message-ID"] = make_msgid(domain=sender.rpartition("@")[2] or "dagrun")
        message.set_content(self._render(self._body, context) if self._body else _body(context))
        return message

    def _render(self, template: str, context: Mapping[str, Any]) -> str:
        from dagrun.runtime.rendering import render

        try:
            return str(render(template, dict(context)))
        except NonRetryableError as exc:
            raise NotifyError(f"{self!r}: {exc}") from None


def _subject(context: Mapping[str, Any]) -> str:
    """``[dagrun] etl.load failed on 2026-01-05 (try 2)``; a run's event names the DAG."""
    what = context["dag_id"]
    if context.get("task_id"):
        what += f".{context['task_id']}"
        if context.get("map_index", -1) != -1:
            what += f"[{context['map_index']}]"
    tried = f" (try {context['try_number']})" if context.get("try_number") else ""
    return f"[dagrun] {what} {context['state']} on {context['ds']}{tried}"


def _body(context: Mapping[str, Any]) -> str:
    """The event's fields, a line each (those it has)."""
    fields = _payload(context)
    names = "event dag_id task_id map_index run_id logical_date try_number state error url"
    lines = [
        f"{name}: {fields[name]}"
        for name in names.split()
        if fields.get(name) not in (None, "") and not (name == "map_index" and fields[name] == -1)
    ]
    return "\n".join(lines) + "\n"


def _payload(context: Mapping[str, Any]) -> dict[str, Any]:
    """The event's identity and outcome: not the whole context, whose params and conf may
    hold anything, secrets and values JSON cannot carry included."""
    body = {
        "event": context["event"],
        "dag_id": context["dag_id"],
        "run_id": context["run_id"],
        "task_id": context["task_id"],
        "map_index": context["map_index"],
        "logical_date": context["logical_date"].isoformat(),
        "try_number": context["try_number"],
        "state": context["state"],
        "error": context["exception"],
    }
    if context.get("url"):
        body["url"] = context["url"]
    return body


def _post(url: str, body: bytes, headers: dict[str, str], timeout: float) -> tuple[int | None, str]:
    """One POST: ``(status, "")`` when the server answered, ``(None, what went wrong)``
    when it did not."""
    import http.client
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with _opener().open(request, timeout=timeout) as response:
            return response.status, ""
    except urllib.error.HTTPError as exc:
        exc.close()
        return exc.code, ""
    except urllib.error.URLError as exc:
        return None, _problem(exc.reason, timeout)
    except (OSError, http.client.HTTPException) as exc:
        return None, _problem(exc, timeout)


@functools.cache
def _opener() -> OpenerDirector:
    """urllib's opener, less redirects: a 3xx is an answer, and a failure."""
    import urllib.request

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    return urllib.request.build_opener(NoRedirect)


def _problem(reason: object, timeout: float) -> str:
    """Why a POST got no answer, in one line (urllib wraps some errors, not others)."""
    if isinstance(reason, TimeoutError):
        return f"no answer within {timeout:g} s"
    if isinstance(reason, BaseException):
        text = str(reason).strip().splitlines()
        return f"{type(reason).__name__}: {text[0]}" if text else type(reason).__name__
    return str(reason)


def _command_environment(context: Mapping[str, Any]) -> dict[str, str]:
    """The event as environment variables; an empty string where the event has no value."""
    try_number = context["try_number"]
    return {
        "DAGRUN_EVENT": context["event"],
        "DAG_ID": context["dag_id"],
        "TASK_ID": context["task_id"] or "",
        "RUN_ID": context["run_id"],
        "DS": context["ds"],
        "TRY_NUMBER": "" if try_number is None else str(try_number),
        "DAGRUN_ERROR": context["exception"] or "",
    }


def _shown(url: str) -> str:
    """``url`` as logs and errors show it: scheme, host, port and path, without the
    userinfo, query and fragment, which may hold secrets."""
    base = re.split(r"[?#]", url, maxsplit=1)[0]
    scheme, sep, rest = base.partition("://")
    if not sep:
        return base
    authority, slash, path = rest.partition("/")
    return f"{scheme}://{authority.rpartition('@')[2]}{slash}{path}"


_ADDRESS = re.compile(r"[^@\s,;<>\"']+@[^@\s,;<>\"']+")


def addresses(value: object, what: str) -> list[str]:
    """Bare addresses (``ops@example.com``) from one, a list, or a string of them separated
    by commas or semicolons (Airflow's ``email``)."""
    if isinstance(value, str):
        items = re.split(r"[,;]", value)
    elif isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        items = list(value)
    else:
        raise NotifyError(f"email {what} must be an address or a list of them, not {value!r}")
    found = [item.strip() for item in items if item.strip()]
    if not found:
        raise NotifyError(f"email {what} names no address")
    for address in found:
        if not _ADDRESS.fullmatch(address):
            raise NotifyError(f"email {what}: {address!r} is not an email address")
    return found


def _template(value: object, what: str) -> str | None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise NotifyError(f"email {what} must be a non-empty str, not {value!r}")
    return value


def _check_url(url: object) -> None:
    if not isinstance(url, str):
        raise NotifyError(f"webhook url must be a str, not {type(url).__name__}")
    try:
        parts = urllib.parse.urlsplit(url)
        good = parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
    except ValueError:
        good = False
    if not good:
        raise NotifyError(
            f"webhook url must start with http:// or https:// and name a host: {_shown(url)!r}"
        )
    if "@" in parts.netloc:
        # urllib would look the userinfo up as part of the host name, and fail every time.
        raise NotifyError(
            f"webhook url {_shown(url)!r} must not hold a user or password: send them in headers"
        )


def _check_headers(headers: object) -> dict[str, str]:
    """The headers as a dict, each name a token and each value one a request can carry
    (else http.client would reject it, quoting the value: the secret)."""
    checked = _strings(headers, "webhook header")
    for name, value in checked.items():
        if not _TOKEN.fullmatch(name):
            raise NotifyError(f"webhook header name {name!r} is not an HTTP token")
        if not _HEADER_VALUE.fullmatch(value):
            raise NotifyError(
                f"webhook header {name!r} has a line break, control character or character "
                "outside Latin-1 in its value"
            )
    return checked


def _check_env(env: object) -> dict[str, str]:
    checked = _strings(env, "command env")
    for name, value in checked.items():
        if not name or "=" in name or "\0" in name + value:
            raise NotifyError(f"command env {name!r} is not a valid environment variable")
    return checked


def _strings(mapping: object, what: str) -> dict[str, str]:
    """``mapping`` as a dict of str to str. Errors name the key and never the value, which
    may be a secret."""
    if mapping is None:
        return {}
    if not isinstance(mapping, Mapping):
        raise NotifyError(f"{what}s must be a mapping of str to str, not {type(mapping).__name__}")
    for name, value in mapping.items():
        if not isinstance(name, str):
            raise NotifyError(f"{what} names must be str, not {type(name).__name__}")
        if not isinstance(value, str):
            raise NotifyError(f"{what} {name!r} must be a str, not {type(value).__name__}")
    return dict(mapping)


def _check_seconds(what: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise NotifyError(f"{what} must be a positive number of seconds, not {value!r}")
    return float(value)


def _check_retries(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise NotifyError(f"webhook retries must be an int >= 0, not {value!r}")
    return value

"""The HTTP vocabulary of the web app: requests, responses, and the errors that become pages."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs

from dagrun.errors import DagNotFound, DagrunError, RunNotFound, TaskNotFound
from dagrun.store.task_reads import AttemptNotFound

ALLOWED_METHODS = ("GET", "HEAD")
#: The largest form body read (the login form's is a few hundred bytes).
MAX_FORM_BYTES = 64 * 1024

#: The CSP allows the site's own stylesheets and script files (web/static/) and nothing
#: inline: no inline script or handler, no ``style=`` attribute, so markup that slips through
#: escaping still runs nothing. A script may fetch from the site itself only (the log page of
#: a running attempt follows its log).
_SECURITY_HEADERS = [
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("X-Frame-Options", "SAMEORIGIN"),
    (
        "Content-Security-Policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'self'",
    ),
]


class HttpError(DagrunError):
    """An answer other than 200, raised by a handler and rendered as a page or JSON."""

    status = HTTPStatus.INTERNAL_SERVER_ERROR

    def __init__(self, message: str, headers: Iterable[tuple[str, str]] = ()):
        super().__init__(message)
        self.message = message
        self.headers = list(headers)


class BadRequest(HttpError, ValueError):
    status = HTTPStatus.BAD_REQUEST


class Unauthorized(HttpError, PermissionError):
    status = HTTPStatus.UNAUTHORIZED


class Forbidden(HttpError, PermissionError):
    status = HTTPStatus.FORBIDDEN


class NotFound(HttpError, LookupError):
    status = HTTPStatus.NOT_FOUND


class MethodNotAllowed(HttpError):
    status = HTTPStatus.METHOD_NOT_ALLOWED


#: Lookups in the store that failed: answered as 404 pages.
NOT_FOUND_ERRORS = (DagNotFound, RunNotFound, TaskNotFound, AttemptNotFound)


@dataclass(frozen=True)
class Visitor:
    """Who a request to a server that asks for a login comes from: the account, and the
    token their pages' forms carry (log out); none for a bearer token."""

    name: str
    form_token: str = ""


@dataclass(frozen=True)
class Request:
    """An HTTP request as the pages read it."""

    method: str
    path: str
    query: dict[str, str]
    #: Header names in lower case, ``-`` between words.
    headers: Mapping[str, str] = field(default_factory=dict)
    remote_addr: str = ""
    #: The fields of a POSTed form (``application/x-www-form-urlencoded``).
    form: Mapping[str, str] = field(default_factory=dict)
    visitor: Visitor | None = None

    @classmethod
    def from_environ(cls, environ: dict[str, Any]) -> Request:
        # PEP 3333 hands PATH_INFO over as latin-1; the browser sent UTF-8.
        raw = environ.get("PATH_INFO") or "/"
        path = raw.encode("latin-1", "replace").decode("utf-8", "replace")
        pairs = parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True)
        method = environ.get("REQUEST_METHOD", "GET").upper()
        headers = {
            key[5:].replace("_", "-").lower(): value
            for key, value in environ.items()
            if key.startswith("HTTP_")
        }
        return cls(
            method,
            path,
            {k: v[0] for k, v in pairs.items()},
            headers,
            environ.get("REMOTE_ADDR", ""),
            _form(environ) if method == "POST" else {},
        )

    @property
    def wants_json(self) -> bool:
        return self.path.startswith("/api/") or self.path in ("/health", "/healthz", "/metrics")


def _form(environ: dict[str, Any]) -> dict[str, str]:
    """The fields of a URL-encoded form body, at most ``MAX_FORM_BYTES`` of it read."""
    if not environ.get("CONTENT_TYPE", "").startswith("application/x-www-form-urlencoded"):
        return {}
    try:
        length = min(int(environ.get("CONTENT_LENGTH") or 0), MAX_FORM_BYTES)
    except ValueError:
        return {}
    body = environ["wsgi.input"].read(length).decode("utf-8", "replace")
    return {k: v[0] for k, v in parse_qs(body, keep_blank_values=True).items()}


def check_method(request: Request) -> None:
    """Refuse every method but GET and HEAD: the site is read-only (the login form's POSTs
    are answered before this, by ``auth.Gate``)."""
    if request.method not in ALLOWED_METHODS:
        raise MethodNotAllowed(
            f"{request.method} is not allowed: this site is read-only",
            [("Allow", ", ".join(ALLOWED_METHODS))],
        )


def check_query(request: Request) -> None:
    """Refuse a NUL character in a query value: no id or name holds one, and PostgreSQL
    refuses text that does (a path holding one matches no route)."""
    for name, value in request.query.items():
        if "\x00" in value:
            raise BadRequest(f"{name} holds a NUL character (%00)")


@dataclass
class Response:
    """An HTTP response as the pages make it."""

    body: bytes
    content_type: str = "text/html; charset=utf-8"
    status: int = HTTPStatus.OK
    headers: list[tuple[str, str]] = field(default_factory=list)
    cache: str = "no-store"

    def header_list(self) -> list[tuple[str, str]]:
        return [
            ("Content-Type", self.content_type),
            ("Content-Length", str(len(self.body))),
            ("Cache-Control", self.cache),
            *_SECURITY_HEADERS,
            *self.headers,
        ]


def json_response(document: Any, status: int = HTTPStatus.OK) -> Response:
    """Compact JSON: with ``indent`` the stdlib falls back to its slow pure-Python encoder."""
    body = json.dumps(document, separators=(",", ":")).encode()
    return Response(body, "application/json; charset=utf-8", status)

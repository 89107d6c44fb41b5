"""The HTTP vocabulary of the web app: requests, responses, and the errors that become pages."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs

from dagrun.errors import DagNotFound, DagrunError, RunNotFound, TaskNotFound
from dagrun.store.task_reads import AttemptNotFound

ALLOWED_METHODS = ("GET", "HEAD")

#: The CSP allows the site's own stylesheet and one script file (web/static/dagrun.js) and
#: nothing inline: no inline script or handler, no ``style=`` attribute, so markup that slips
#: through escaping still runs nothing.
_SECURITY_HEADERS = [
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("X-Frame-Options", "SAMEORIGIN"),
    (
        "Content-Security-Policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "base-uri 'none'; form-action 'self'; frame-ancestors 'self'",
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


class Forbidden(HttpError, PermissionError):
    status = HTTPStatus.FORBIDDEN


class NotFound(HttpError, LookupError):
    status = HTTPStatus.NOT_FOUND


class MethodNotAllowed(HttpError):
    status = HTTPStatus.METHOD_NOT_ALLOWED


#: Lookups in the store that failed: answered as 404 pages.
NOT_FOUND_ERRORS = (DagNotFound, RunNotFound, TaskNotFound, AttemptNotFound)


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, str]

    @classmethod
    def from_environ(cls, environ: dict[str, Any]) -> Request:
        # PEP 3333 hands PATH_INFO over as latin-1; the browser sent UTF-8.
        raw = environ.get("PATH_INFO") or "/"
        path = raw.encode("latin-1", "replace").decode("utf-8", "replace")
        pairs = parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True)
        return cls(
            environ.get("REQUEST_METHOD", "GET").upper(), path, {k: v[0] for k, v in pairs.items()}
        )

    @property
    def wants_json(self) -> bool:
        return self.path.startswith("/api/") or self.path in ("/health", "/healthz", "/metrics")


def check_method(request: Request) -> None:
    """Refuse every method but GET and HEAD: the site is read-only."""
    if request.method not in ALLOWED_METHODS:
        raise MethodNotAllowed(
            f"{request.method} is not allowed: this site is read-only",
            [("Allow", ", ".join(ALLOWED_METHODS))],
        )


@dataclass
class Response:
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

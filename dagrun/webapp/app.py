"""The WSGI application: dispatch one request and turn every failure into a page.

Unknown DAGs, runs, tasks and tries are 404 pages; an unexpected error is logged here and
answered with a 500 page that carries no traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jinja2 import Environment

from dagrun.errors import StoreError
from dagrun.store import Store
from dagrun.store.location import dagrun_home
from dagrun.webapp.documents import ErrorJson
from dagrun.webapp.http import (
    NOT_FOUND_ERRORS,
    HttpError,
    Request,
    Response,
    check_method,
    check_query,
    json_response,
)
from dagrun.webapp.routes import route
from dagrun.webapp.templates import StaticFiles, environment, load_static, render

if TYPE_CHECKING:
    from dagrun.webapp.auth import Gate

log = logging.getLogger("dagrun.web")

REFRESH_SECONDS = 5
#: A log page shows at most this much of the end of an attempt's log.
LOG_TAIL_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Site:
    """What a page handler needs: the store, the templates and static files, where logs
    live and how much of one to show, and how often an active page refreshes."""

    store: Store
    env: Environment
    static_files: StaticFiles
    logs_root: Path
    refresh_seconds: int = REFRESH_SECONDS
    log_tail_bytes: int = LOG_TAIL_BYTES


class WebApp:
    """The WSGI application: ``WebApp(store)`` is callable as ``app(environ, start_response)``.
    With a ``gate`` (a server off loopback) every request passes it first (``auth``)."""

    def __init__(
        self,
        store: Store,
        *,
        logs_root: Path | None = None,
        refresh_seconds: int = REFRESH_SECONDS,
        log_tail_bytes: int = LOG_TAIL_BYTES,
        gate: Gate | None = None,
    ):
        self.gate = gate
        static_files = load_static()
        self.site = Site(
            store=store,
            env=environment(static_files, store),
            static_files=static_files,
            logs_root=(logs_root or dagrun_home() / "logs").resolve(),
            refresh_seconds=refresh_seconds,
            log_tail_bytes=log_tail_bytes,
        )

    def __call__(self, environ: dict[str, Any], start_response: Callable) -> list[bytes]:
        request = Request.from_environ(environ)
        response = self.respond(request)
        status = HTTPStatus(response.status)
        start_response(f"{status.value} {status.phrase}", response.header_list())
        return [b""] if request.method == "HEAD" else [response.body]

    def respond(self, request: Request) -> Response:
        """Route one request and turn every failure into a page: never a traceback."""
        try:
            if self.gate is not None:
                admitted = self.gate.admit(self.site, request)
                if isinstance(admitted, Response):
                    return admitted
                request = admitted
            check_method(request)
            check_query(request)
            handler, params = route(request.path)
            return handler(self.site, request, **params)
        except HttpError as exc:
            return self._error(request, exc.status, exc.message, exc.headers)
        except NOT_FOUND_ERRORS as exc:
            return self._error(request, HTTPStatus.NOT_FOUND, str(exc))
        except StoreError as exc:
            log.warning("database unavailable for %s: %s", request.path, exc)
            return self._error(
                request, HTTPStatus.SERVICE_UNAVAILABLE, "the database is unavailable"
            )
        except Exception:
            log.exception("error serving %s %s", request.method, request.path)
            return self._error(request, HTTPStatus.INTERNAL_SERVER_ERROR, "internal error")

    def _error(
        self,
        request: Request,
        status: int,
        message: str,
        headers: Iterable[tuple[str, str]] = (),
    ) -> Response:
        if request.wants_json:
            error: ErrorJson = {"error": message, "status": int(status)}
            response = json_response(error, status)
        else:
            try:
                response = render(
                    self.site.env,
                    "error.html",
                    request,
                    status,
                    code=HTTPStatus(status),
                    message=message,
                )
            except Exception:
                log.exception("error page failed to render")
                response = Response(message.encode(), "text/plain; charset=utf-8")
        response.status = status
        response.headers.extend(headers)
        return response

"""The read-only web page and JSON API over the store: DAG list, run grid, runs, logs.

A plain WSGI application (no framework) rendered with Jinja2 templates shipped in
``dagrun.web``. It is safe to leave running next to the scheduler and workers:

* Each request reads inside one short read transaction (a WAL snapshot on SQLite) and renders
  after it ends, so no lock is held while HTML is built or sent.
* Only GET and HEAD are served; every string that came from a DAG file, an error or a log is
  escaped by Jinja's autoescape; a log is named by (dag, run, task, try) in the URL, never by
  a path, and the path the store recorded must resolve inside the logs folder.
* Unknown DAGs, runs, tasks and tries are 404 pages; an unexpected error is logged here and
  answered with a 500 page that carries no traceback.

The HTML pages and the ``/api`` routes share their view models, so the API mirrors the pages.
"""

from __future__ import annotations

import hashlib
import json
import logging
import mimetypes
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http import HTTPStatus
from importlib.resources import files
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from urllib.parse import parse_qs, quote, urlencode
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server
from zoneinfo import ZoneInfo

from jinja2 import Environment, PackageLoader, StrictUndefined

from dagrun.errors import DagNotFound, DagrunError, RunNotFound, StoreError, TaskNotFound
from dagrun.states import RunState, TaskState
from dagrun.store import Store, queries, registry, views
from dagrun.store.engine import dagrun_home
from dagrun.store.queries import RunRow, TaskRow
from dagrun.store.views import AttemptNotFound, DagInfo, GridPage

log = logging.getLogger("dagrun.web")

DEFAULT_RUNS_PER_PAGE = 25
MAX_RUNS_PER_PAGE = 100
RECENT_RUNS_PER_DAG = 14
REFRESH_SECONDS = 5
#: A log page shows at most this much of the end of the file.
LOG_TAIL_BYTES = 1024 * 1024
ALLOWED_METHODS = ("GET", "HEAD")

_SECURITY_HEADERS = [
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("X-Frame-Options", "SAMEORIGIN"),
    (
        "Content-Security-Policy",
        "default-src 'none'; style-src 'self'; img-src 'self'; base-uri 'none'; "
        "form-action 'self'; frame-ancestors 'self'",
    ),
]


# ---------------------------------------------------------------- HTTP: requests, responses


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


_NOT_FOUND_ERRORS = (DagNotFound, RunNotFound, TaskNotFound, AttemptNotFound)


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
        return self.path.startswith("/api/") or self.path in ("/healthz", "/metrics")


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


# ---------------------------------------------------------------- URLs and formatting


def _q(value: str) -> str:
    return quote(value, safe="")


def grid_url(dag_id: str, **query: Any) -> str:
    params = {k: v for k, v in query.items() if v is not None}
    return f"/dags/{_q(dag_id)}/grid" + (f"?{urlencode(params)}" if params else "")


def run_url(dag_id: str, run_id: str) -> str:
    return f"/dags/{_q(dag_id)}/runs/{_q(run_id)}"


def log_url(dag_id: str, run_id: str, task_id: str, try_number: int) -> str:
    return f"{run_url(dag_id, run_id)}/tasks/{_q(task_id)}/tries/{try_number}/log"


def url_with(request: Request, **changes: Any) -> str:
    """This page's URL with some query parameters changed (None removes one)."""
    query = {k: v for k, v in {**request.query, **changes}.items() if v is not None}
    return quote(request.path, safe="/") + (f"?{urlencode(query)}" if query else "")


def iso(value: datetime | None) -> str | None:
    """ISO 8601 in UTC with a ``Z``: the API's instants and the grid's ``before`` cursor."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def local(value: datetime | None, tz: ZoneInfo, seconds: bool = False) -> str:
    if value is None:
        return "-"
    return value.astimezone(tz).strftime("%Y-%m-%d %H:%M:%S %Z" if seconds else "%Y-%m-%d %H:%M %Z")


def utc(value: datetime | None) -> str:
    return "-" if value is None else value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.2f}s" if seconds < 10 else f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


def live_duration(
    state: str, duration: float | None, start: datetime | None, now: datetime
) -> float | None:
    """The recorded duration; for a running task, how long it has been running so far."""
    if duration is None and state == TaskState.RUNNING.value and start is not None:
        return max(0.0, (now - start).total_seconds())
    return duration


# ---------------------------------------------------------------- view models


@dataclass(frozen=True)
class GridColumn:
    """One run as a grid column, with what each of its cells repeats worked out once."""

    run: RunRow
    href: str
    local: str
    utc: str


@dataclass(frozen=True)
class GridCell:
    task_id: str
    column: GridColumn
    state: str
    try_number: int
    max_tries: int
    duration: float | None

    @property
    def run_id(self) -> str:
        return self.column.run.run_id

    @property
    def title(self) -> str:
        """What hovering shows: state, try and duration, and the date in both zones."""
        return (
            f"{self.task_id} · {self.state}\ntry {self.try_number} of {self.max_tries} · "
            f"{fmt_duration(self.duration)}\n{self.column.local} ({self.column.utc})"
        )

    @property
    def href(self) -> str:
        return f"{self.column.href}#task-{self.task_id}"


@dataclass(frozen=True)
class GridRow:
    task_id: str
    removed: bool
    cells: list[GridCell]


@dataclass(frozen=True)
class TaskLine:
    """One task of a run: its instance (None before the run was admitted) and attempts."""

    task_id: str
    removed: bool
    instance: TaskRow | None
    attempts: list[views.Attempt]
    duration: float | None

    @property
    def state(self) -> str:
        return self.instance.state if self.instance else TaskState.NONE.value


def _task_order(info: DagInfo, found: Iterable[str]) -> list[tuple[str, bool]]:
    """Tasks in topological order, then tasks of past runs no longer in the DAG (removed)."""
    known = [t.task_id for t in info.spec.tasks]
    extra = sorted(set(found) - set(known))
    return [(t, False) for t in known] + [(t, True) for t in extra]


def grid_columns(info: DagInfo, page: GridPage) -> list[GridColumn]:
    tz = info.spec.timetable.tz
    return [
        GridColumn(
            run,
            run_url(info.dag_id, run.run_id),
            local(run.logical_date, tz),
            utc(run.logical_date),
        )
        for run in page.runs
    ]


def grid_rows(
    columns: list[GridColumn], page: GridPage, tasks: list[tuple[str, bool]], now: datetime
) -> list[GridRow]:
    """Rows of cells (task by run) built once, for the HTML grid and the JSON grid alike."""
    return [
        GridRow(task_id, removed, [_grid_cell(task_id, c, page, now) for c in columns])
        for task_id, removed in tasks
    ]


def _grid_cell(task_id: str, column: GridColumn, page: GridPage, now: datetime) -> GridCell:
    cell = page.cell(column.run.id, task_id)
    if cell is None:  # the run has not been admitted yet, or the task is newer than the run
        return GridCell(task_id, column, TaskState.NONE.value, 0, 0, None)
    duration = live_duration(cell.state, cell.duration, cell.start_date, now)
    return GridCell(task_id, column, cell.state, cell.try_number, cell.max_tries, duration)


def task_lines(
    info: DagInfo, instances: list[TaskRow], attempts: dict[str, list[views.Attempt]], now: datetime
) -> list[TaskLine]:
    by_task = {t.task_id: t for t in instances}
    lines = []
    for task_id, removed in _task_order(info, by_task):
        instance = by_task.get(task_id)
        duration = None
        if instance is not None:
            duration = live_duration(instance.state, instance.duration, instance.start_date, now)
        lines.append(TaskLine(task_id, removed, instance, attempts.get(task_id, []), duration))
    return lines


@dataclass(frozen=True)
class GridView:
    """Everything the grid page and ``/api/dags/<id>/grid`` show, read in one transaction."""

    dag: DagInfo
    page: GridPage
    columns: list[GridColumn]
    rows: list[GridRow]
    paging: Paging
    active: bool


@dataclass(frozen=True)
class RunView:
    dag: DagInfo
    run: RunRow
    lines: list[TaskLine]


# ---------------------------------------------------------------- JSON shapes


def dag_json(info: DagInfo, recent: list[RunRow]) -> dict[str, Any]:
    tz = info.spec.timetable.tz
    upcoming = info.next_logical_date
    return {
        "dag_id": info.dag_id,
        "description": info.spec.description,
        "schedule": info.spec.schedule_text,
        "timezone": info.spec.timezone,
        "paused": info.is_paused,
        "active": info.is_active,
        "fileloc": info.fileloc,
        "tags": list(info.spec.tags),
        "tasks": [t.task_id for t in info.spec.tasks],
        "next_logical_date": iso(upcoming),
        "local_next_logical_date": upcoming.astimezone(tz).isoformat() if upcoming else None,
        "recent_runs": [run_json(r, tz) for r in recent],
    }


def run_json(run: RunRow, tz: ZoneInfo) -> dict[str, Any]:
    return {
        "run_id": run.run_id,
        "logical_date": iso(run.logical_date),
        "local_logical_date": run.logical_date.astimezone(tz).isoformat(),
        "data_interval_start": iso(run.data_interval_start),
        "data_interval_end": iso(run.data_interval_end),
        "state": run.state,
        "run_type": run.run_type,
        "start_date": iso(run.start_date),
        "end_date": iso(run.end_date),
        "duration": run.duration,
    }


def task_json(dag_id: str, run: RunRow, line: TaskLine) -> dict[str, Any]:
    ti = line.instance
    return {
        "task_id": line.task_id,
        "state": line.state,
        "try_number": ti.try_number if ti else 0,
        "max_tries": ti.max_tries if ti else 0,
        "start_date": iso(ti.start_date) if ti else None,
        "end_date": iso(ti.end_date) if ti else None,
        "duration": line.duration,
        "error": ti.last_error if ti else None,
        "removed": line.removed,
        "attempts": [
            {
                "try_number": a.try_number,
                "worker": a.worker,
                "outcome": a.outcome,
                "started_at": iso(a.started_at),
                "ended_at": iso(a.ended_at),
                "error": a.error,
                "log_url": log_url(dag_id, run.run_id, line.task_id, a.try_number),
            }
            for a in line.attempts
        ],
    }


def grid_json(grid: GridView) -> dict[str, Any]:
    tz = grid.dag.spec.timetable.tz
    return {
        "dag_id": grid.dag.dag_id,
        "timezone": grid.dag.spec.timezone,
        "runs": [run_json(c.run, tz) for c in grid.columns],
        "tasks": [
            {
                "task_id": row.task_id,
                "removed": row.removed,
                "cells": [
                    {
                        "run_id": c.run_id,
                        "state": c.state,
                        "try_number": c.try_number,
                        "max_tries": c.max_tries,
                        "duration": c.duration,
                    }
                    for c in row.cells
                ],
            }
            for row in grid.rows
        ],
        "page": {
            "runs": grid.paging.runs,
            "before": iso(grid.paging.before),
            "older_before": iso(grid.page.older_before),
            "has_newer": grid.page.has_newer,
            "newer_before": iso(grid.page.newer_before),
        },
    }


def metrics_text(m: views.Metrics) -> str:
    """The Prometheus text exposition format (version 0.0.4)."""
    lines: list[str] = []

    def family(name: str, kind: str, help_: str, samples: list[tuple[str, float]]) -> None:
        lines.extend([f"# HELP {name} {help_}", f"# TYPE {name} {kind}"])
        lines.extend(f"{name}{labels} {value:g}" for labels, value in samples)

    def by_state(counts: dict[str, int]) -> list[tuple[str, float]]:
        return [(f'{{state="{state}"}}', n) for state, n in sorted(counts.items())]

    family("dagrun_runs", "gauge", "DAG runs by state.", by_state(m.runs))
    family("dagrun_task_instances", "gauge", "Task instances by state.", by_state(m.task_instances))
    family("dagrun_queued_tasks", "gauge", "Task instances waiting for a worker.", [("", m.queued)])
    family(
        "dagrun_oldest_queued_task_age_seconds",
        "gauge",
        "Seconds the oldest queued task instance has waited (0 when none).",
        [("", m.oldest_queued_age)],
    )
    family(
        "dagrun_expired_leases",
        "gauge",
        "Running task instances whose lease has expired and awaits the reaper.",
        [("", m.expired_leases)],
    )
    family(
        "dagrun_stale_completions_total",
        "counter",
        "Completions rejected because the attempt had lost its lease.",
        [("", m.stale_completions)],
    )
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- query parameters


@dataclass(frozen=True)
class Paging:
    runs: int
    before: datetime | None

    @classmethod
    def from_query(cls, query: dict[str, str]) -> Paging:
        return cls(_runs_param(query.get("runs")), _instant_param(query.get("before")))


def _runs_param(value: str | None) -> int:
    if value is None or value == "":
        return DEFAULT_RUNS_PER_PAGE
    if not re.fullmatch(r"[0-9]{1,6}", value):
        raise BadRequest(f"runs must be a whole number from 1 to {MAX_RUNS_PER_PAGE}")
    return min(max(int(value), 1), MAX_RUNS_PER_PAGE)


def _instant_param(value: str | None) -> datetime | None:
    """An ISO 8601 instant; a '+' decoded to a space by the query string is put back."""
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.strip().replace(" ", "+"))
        return parsed.astimezone(UTC) if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    except (ValueError, OverflowError):
        raise BadRequest("before must be an ISO 8601 instant, e.g. 2026-01-31T00:00:00Z") from None


# ---------------------------------------------------------------- logs


@dataclass(frozen=True)
class LogText:
    path: Path
    text: str
    skipped_bytes: int


def read_log(recorded: str | None, root: Path) -> LogText:
    """The tail of an attempt's log, only if its real path lies inside the logs folder.

    ``resolve()`` follows ``..`` and symbolic links first, so neither a crafted path in the
    store nor a link planted in the folder can reach a file outside it.
    """
    if not recorded:
        raise NotFound("this attempt recorded no log file")
    path = Path(recorded).resolve()
    if not path.is_relative_to(root.resolve()):
        raise Forbidden("the recorded log file lies outside the logs folder")
    if not path.is_file():
        raise NotFound("the log file is not on this host")
    size = path.stat().st_size
    skipped = max(0, size - LOG_TAIL_BYTES)
    with path.open("rb") as handle:
        handle.seek(skipped)
        data = handle.read(LOG_TAIL_BYTES)
    return LogText(path, data.decode("utf-8", "replace"), skipped)


# ---------------------------------------------------------------- the application

_ID = r"(?P<{}>[A-Za-z0-9_.-]+)"
_DAG = _ID.format("dag_id")
_RUN = r"(?P<run_id>.+)"
_LOG = (
    rf"/dags/{_DAG}/runs/{_RUN}/tasks/{_ID.format('task_id')}/tries/(?P<try_number>\d{{1,9}})/log"
)
ROUTES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(pattern), handler)
    for pattern, handler in [
        (r"/", "dag_list"),
        (r"/import-errors", "import_errors"),
        (rf"/dags/{_DAG}(?:/grid)?", "grid"),
        (_LOG, "log"),
        (rf"/dags/{_DAG}/runs/{_RUN}", "run"),
        (r"/static/(?P<name>[A-Za-z0-9_.-]+)", "static"),
        (r"/api/dags", "api_dags"),
        (r"/api/import-errors", "api_import_errors"),
        (rf"/api/dags/{_DAG}/grid", "api_grid"),
        (rf"/api/dags/{_DAG}/runs", "api_runs"),
        (rf"/api/dags/{_DAG}/runs/{_RUN}", "api_run"),
        (r"/healthz", "healthz"),
        (r"/metrics", "metrics"),
    ]
]


def _load_static() -> dict[str, tuple[bytes, str]]:
    """Static files read once into memory: a request names a file, never a path."""
    folder = files("dagrun.web").joinpath("static")
    found = {}
    for entry in folder.iterdir():
        if entry.is_file():
            kind = mimetypes.guess_type(entry.name)[0] or "application/octet-stream"
            found[entry.name] = (entry.read_bytes(), kind)
    return found


class WebApp:
    """The WSGI application: ``WebApp(store)`` is callable as ``app(environ, start_response)``."""

    def __init__(
        self,
        store: Store,
        *,
        logs_root: Path | None = None,
        refresh_seconds: int = REFRESH_SECONDS,
    ):
        self.store = store
        self.logs_root = (logs_root or dagrun_home() / "logs").resolve()
        self.refresh_seconds = refresh_seconds
        self.static_files = _load_static()
        self.env = self._environment()

    def _environment(self) -> Environment:
        env = Environment(
            loader=PackageLoader("dagrun.web", "templates"),
            autoescape=True,
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        versions = {n: hashlib.sha1(b).hexdigest()[:10] for n, (b, _) in self.static_files.items()}
        env.globals.update(
            grid_url=grid_url,
            run_url=run_url,
            log_url=log_url,
            static=lambda name: f"/static/{name}?v={versions[name]}",
            states=[s.value for s in TaskState],
        )
        env.filters.update(local=local, utc=utc, iso=iso, duration=fmt_duration)
        return env

    # ------------------------------------------------------------ WSGI entry and dispatch

    def __call__(self, environ: dict[str, Any], start_response: Callable) -> list[bytes]:
        request = Request.from_environ(environ)
        response = self.respond(request)
        status = HTTPStatus(response.status)
        start_response(f"{status.value} {status.phrase}", response.header_list())
        return [b""] if request.method == "HEAD" else [response.body]

    def respond(self, request: Request) -> Response:
        """Route one request and turn every failure into a page: never a traceback."""
        try:
            if request.method not in ALLOWED_METHODS:
                raise MethodNotAllowed(
                    f"{request.method} is not allowed: this site is read-only",
                    [("Allow", ", ".join(ALLOWED_METHODS))],
                )
            handler, params = self._route(request.path)
            return handler(request, **params)
        except HttpError as exc:
            return self._error(request, exc.status, exc.message, exc.headers)
        except _NOT_FOUND_ERRORS as exc:
            return self._error(request, HTTPStatus.NOT_FOUND, str(exc))
        except StoreError as exc:
            log.warning("database unavailable for %s: %s", request.path, exc)
            return self._error(
                request, HTTPStatus.SERVICE_UNAVAILABLE, "the database is unavailable"
            )
        except Exception:
            log.exception("error serving %s %s", request.method, request.path)
            return self._error(request, HTTPStatus.INTERNAL_SERVER_ERROR, "internal error")

    def _route(self, path: str) -> tuple[Callable[..., Response], dict[str, str]]:
        for pattern, name in ROUTES:
            match = pattern.fullmatch(path)
            if match:
                return getattr(self, f"_{name}"), match.groupdict()
        raise NotFound(f"no page at {path}")

    def _error(
        self,
        request: Request,
        status: int,
        message: str,
        headers: Iterable[tuple[str, str]] = (),
    ) -> Response:
        if request.wants_json:
            response = json_response({"error": message, "status": int(status)}, status)
        else:
            try:
                response = self._page(
                    "error.html", request, status, code=HTTPStatus(status), message=message
                )
            except Exception:
                log.exception("error page failed to render")
                response = Response(message.encode(), "text/plain; charset=utf-8")
        response.status = status
        response.headers.extend(headers)
        return response

    def _page(
        self,
        template: str,
        request: Request,
        status: int = HTTPStatus.OK,
        refresh: int = 0,
        **context: Any,
    ) -> Response:
        body = self.env.get_template(template).render(
            request=request,
            self_url=lambda **changes: url_with(request, **changes),
            refresh=refresh,
            **context,
        )
        return Response(body.encode(), status=status)

    def _refresh(self, request: Request, active: bool) -> int:
        """Seconds between self-refreshes: only while runs are active, never with refresh=0."""
        return self.refresh_seconds if active and request.query.get("refresh") != "0" else 0

    # ------------------------------------------------------------ pages

    def _dag_list(self, request: Request) -> Response:
        with self.store.read() as conn:
            infos, recent, errors = self._dag_list_data(conn)
            active = views.has_active_runs(conn)
        return self._page(
            "dags.html",
            request,
            dags=[(info, recent[info.dag_id]) for info in infos],
            error_count=errors,
            refresh=self._refresh(request, active),
        )

    def _dag_list_data(self, conn) -> tuple[list[DagInfo], dict[str, list[RunRow]], int]:
        infos = views.dag_infos(conn, self.store.now(conn))
        recent = views.recent_runs(conn, [i.dag_id for i in infos], RECENT_RUNS_PER_DAG)
        return infos, recent, views.import_error_count(conn)

    def _import_errors(self, request: Request) -> Response:
        with self.store.read() as conn:
            errors = registry.import_errors(conn)
        return self._page("errors.html", request, errors=errors)

    def _grid_view(self, request: Request, dag_id: str) -> GridView:
        paging = Paging.from_query(request.query)
        with self.store.read() as conn:
            now = self.store.now(conn)
            info = views.dag_info(conn, dag_id, now)
            page = views.grid_page(conn, dag_id, paging.before, paging.runs)
            active = views.has_active_runs(conn, dag_id)
        columns = grid_columns(info, page)
        rows = grid_rows(columns, page, _task_order(info, page.task_ids), now)
        return GridView(info, page, columns, rows, paging, active)

    def _grid(self, request: Request, dag_id: str) -> Response:
        grid = self._grid_view(request, dag_id)
        return self._page(
            "grid.html",
            request,
            dag=grid.dag,
            tz=grid.dag.spec.timetable.tz,
            grid=grid,
            page_sizes=(DEFAULT_RUNS_PER_PAGE, 50, MAX_RUNS_PER_PAGE),
            refresh=self._refresh(request, grid.active),
        )

    def _run_view(self, dag_id: str, run_id: str) -> RunView:
        with self.store.read() as conn:
            now = self.store.now(conn)
            info = views.dag_info(conn, dag_id, now)
            run = queries.run_by_id(conn, dag_id, run_id)
            instances = queries.task_instances(conn, [run.id])
            attempts = views.run_attempts(conn, run.id)
        return RunView(info, run, task_lines(info, instances, attempts, now))

    def _run(self, request: Request, dag_id: str, run_id: str) -> Response:
        view = self._run_view(dag_id, run_id)
        return self._page(
            "run.html",
            request,
            dag=view.dag,
            tz=view.dag.spec.timetable.tz,
            run=view.run,
            lines=view.lines,
            refresh=self._refresh(request, RunState(view.run.state).active),
        )

    def _log(
        self, request: Request, dag_id: str, run_id: str, task_id: str, try_number: str
    ) -> Response:
        with self.store.read() as conn:
            info = views.dag_info(conn, dag_id, self.store.now(conn))
            run = queries.run_by_id(conn, dag_id, run_id)
            queries.task_instance(conn, run, task_id)
            attempt = views.attempt(conn, dag_id, run.id, task_id, int(try_number))
            others = views.run_attempts(conn, run.id).get(task_id, [])
        text = read_log(attempt.log_path, self.logs_root)
        return self._page(
            "log.html",
            request,
            dag=info,
            tz=info.spec.timetable.tz,
            run=run,
            attempt=attempt,
            attempts=others,
            log=text,
            refresh=self._refresh(request, attempt.ended_at is None),
        )

    def _static(self, request: Request, name: str) -> Response:
        found = self.static_files.get(name)
        if found is None:
            raise NotFound(f"no static file {name}")
        body, kind = found
        return Response(body, kind, cache="public, max-age=86400")

    # ------------------------------------------------------------ JSON API

    def _api_dags(self, request: Request) -> Response:
        with self.store.read() as conn:
            infos, recent, errors = self._dag_list_data(conn)
        return json_response(
            {
                "dags": [dag_json(i, recent[i.dag_id]) for i in infos],
                "import_errors": errors,
            }
        )

    def _api_import_errors(self, request: Request) -> Response:
        with self.store.read() as conn:
            errors = registry.import_errors(conn)
        return json_response(
            [{"file": e.path, "error": e.error, "line": e.error_line} for e in errors]
        )

    def _api_grid(self, request: Request, dag_id: str) -> Response:
        return json_response(grid_json(self._grid_view(request, dag_id)))

    def _api_runs(self, request: Request, dag_id: str) -> Response:
        paging = Paging.from_query(request.query)
        state = request.query.get("state") or None
        with self.store.read() as conn:
            info = views.dag_info(conn, dag_id, self.store.now(conn))
            runs, older = views.run_page(conn, dag_id, paging.before, paging.runs, state)
        tz = info.spec.timetable.tz
        return json_response({"runs": [run_json(r, tz) for r in runs], "older_before": iso(older)})

    def _api_run(self, request: Request, dag_id: str, run_id: str) -> Response:
        view = self._run_view(dag_id, run_id)
        document = run_json(view.run, view.dag.spec.timetable.tz)
        document["tasks"] = [task_json(dag_id, view.run, line) for line in view.lines]
        return json_response(document)

    def _healthz(self, request: Request) -> Response:
        """200 when the database answers a read, 503 (not a 500 page) when it does not."""
        try:
            with self.store.read() as conn:
                version = self.store.schema_version(conn)
        except Exception as exc:
            log.warning("health check failed: %s", exc)
            return json_response({"status": "error", "error": "database unavailable"}, 503)
        return json_response(
            {"status": "ok", "database": self.store.dialect, "schema_version": version}
        )

    def _metrics(self, request: Request) -> Response:
        with self.store.read() as conn:
            found = views.metrics(conn, self.store.now(conn))
        return Response(metrics_text(found).encode(), "text/plain; version=0.0.4; charset=utf-8")


# ---------------------------------------------------------------- the server


class ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    """One thread per request, so a slow client never stalls the page for everyone else."""

    daemon_threads = True
    allow_reuse_address = True


class _LoggingHandler(WSGIRequestHandler):
    """Access lines go to the ``dagrun.web`` logger instead of raw stderr."""

    def log_message(self, format: str, *args: Any) -> None:
        log.info("%s %s", self.address_string(), format % args)


def make_web_server(app: WebApp, host: str, port: int) -> WSGIServer:
    """A threaded WSGI server bound to ``host:port`` (port 0 picks a free one)."""
    return make_server(
        host, port, app, server_class=ThreadingWSGIServer, handler_class=_LoggingHandler
    )

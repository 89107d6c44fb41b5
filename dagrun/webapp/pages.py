"""The HTML pages: DAG list, import errors, run grid, run, attempt log, and static files.

Each handler is called as ``handler(app, request, **url_params)`` and returns a Response; a
missing DAG, run, task or try raises and becomes a 404 page in ``WebApp.respond``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dagrun.states import RunState
from dagrun.store import queries, registry, views
from dagrun.webapp.http import NotFound, Request, Response
from dagrun.webapp.logs import read_log
from dagrun.webapp.models import read_dag_list, read_grid, read_run
from dagrun.webapp.paging import DEFAULT_RUNS_PER_PAGE, MAX_RUNS_PER_PAGE, Paging
from dagrun.webapp.templates import render

if TYPE_CHECKING:
    from dagrun.webapp.app import WebApp


def _page(app: WebApp, template: str, request: Request, **context: Any) -> Response:
    return render(app.env, template, request, **context)


def _refresh(app: WebApp, request: Request, active: bool) -> int:
    """Seconds between self-refreshes: only while runs are active, never with refresh=0."""
    return app.refresh_seconds if active and request.query.get("refresh") != "0" else 0


def dag_list(app: WebApp, request: Request) -> Response:
    with app.store.read() as conn:
        infos, recent, errors = read_dag_list(app.store, conn)
        active = views.has_active_runs(conn)
    return _page(
        app,
        "dags.html",
        request,
        dags=[(info, recent[info.dag_id]) for info in infos],
        error_count=errors,
        refresh=_refresh(app, request, active),
    )


def import_errors(app: WebApp, request: Request) -> Response:
    with app.store.read() as conn:
        errors = registry.import_errors(conn)
    return _page(app, "errors.html", request, errors=errors)


def grid(app: WebApp, request: Request, dag_id: str) -> Response:
    view = read_grid(app.store, dag_id, Paging.from_query(request.query))
    return _page(
        app,
        "grid.html",
        request,
        dag=view.dag,
        tz=view.dag.spec.timetable.tz,
        grid=view,
        page_sizes=(DEFAULT_RUNS_PER_PAGE, 50, MAX_RUNS_PER_PAGE),
        refresh=_refresh(app, request, view.active),
    )


def run(app: WebApp, request: Request, dag_id: str, run_id: str) -> Response:
    view = read_run(app.store, dag_id, run_id)
    return _page(
        app,
        "run.html",
        request,
        dag=view.dag,
        tz=view.dag.spec.timetable.tz,
        run=view.run,
        lines=view.lines,
        refresh=_refresh(app, request, RunState(view.run.state).active),
    )


def log(
    app: WebApp, request: Request, dag_id: str, run_id: str, task_id: str, try_number: str
) -> Response:
    with app.store.read() as conn:
        info = views.dag_info(conn, dag_id, app.store.now(conn))
        dag_run = queries.run_by_id(conn, dag_id, run_id)
        queries.task_instance(conn, dag_run, task_id)
        attempt = views.attempt(conn, dag_id, dag_run.id, task_id, int(try_number))
        others = views.run_attempts(conn, dag_run.id).get(task_id, [])
    text = read_log(attempt, app.logs_root)
    return _page(
        app,
        "log.html",
        request,
        dag=info,
        tz=info.spec.timetable.tz,
        run=dag_run,
        attempt=attempt,
        attempts=others,
        log=text,
        refresh=_refresh(app, request, attempt.ended_at is None),
    )


def static(app: WebApp, request: Request, name: str) -> Response:
    found = app.static_files.get(name)
    if found is None:
        raise NotFound(f"no static file {name}")
    body, kind = found
    return Response(body, kind, cache="public, max-age=86400")

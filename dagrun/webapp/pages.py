"""The HTML pages: DAG list, import errors and warnings, run grid, run, a run's Gantt,
durations over time, attempt log, audit log, and static files.

Each handler is called as ``handler(site, request, **url_params)`` and returns a Response; a
missing DAG, run, task or try raises and becomes a 404 page in ``WebApp.respond``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dagrun.states import RunState
from dagrun.store import dag_reads, run_reads, task_reads
from dagrun.webapp.asset_views import read_assets, read_dag_assets
from dagrun.webapp.callback_views import read_callback, read_callbacks
from dagrun.webapp.durations import MAX_RUNS, read_durations, runs_param
from dagrun.webapp.gantt import read_gantt
from dagrun.webapp.grid import GridShape
from dagrun.webapp.http import BadRequest, NotFound, Request, Response
from dagrun.webapp.logs import read_log
from dagrun.webapp.models import (
    read_audit,
    read_dag,
    read_dag_list,
    read_graph,
    read_grid,
    read_run,
)
from dagrun.webapp.paging import DEFAULT_RUNS_PER_PAGE, MAX_RUNS_PER_PAGE, Paging
from dagrun.webapp.templates import render

if TYPE_CHECKING:
    from dagrun.store.run_reads import RunRow
    from dagrun.webapp.app import Site
    from dagrun.webapp.models import DagInfo


def _page(site: Site, template: str, request: Request, **context: Any) -> Response:
    return render(site.env, template, request, **context)


def _dag_page(
    site: Site, template: str, request: Request, dag: DagInfo, **context: Any
) -> Response:
    """A page about one DAG: its times shown in the DAG's zone (``tz``)."""
    return _page(site, template, request, dag=dag, tz=dag.spec.timetable.tz, **context)


def _run_page(
    site: Site, template: str, request: Request, dag: DagInfo, run: RunRow, **context: Any
) -> Response:
    """A page about one run of a DAG, refreshing while the run is active."""
    refresh = _refresh(site, request, RunState(run.state).active)
    return _dag_page(site, template, request, dag, run=run, refresh=refresh, **context)


def _refresh(site: Site, request: Request, active: bool) -> int:
    """Seconds between self-refreshes: only while runs are active, never with refresh=0."""
    return site.refresh_seconds if active and request.query.get("refresh") != "0" else 0


def dag_list(site: Site, request: Request) -> Response:
    with site.store.read() as conn:
        infos, recent, errors = read_dag_list(site.store, conn)
        active = run_reads.has_active_runs(conn)
    return _page(
        site,
        "dags.html",
        request,
        dags=[(info, recent[info.dag_id]) for info in infos],
        error_count=errors,
        refresh=_refresh(site, request, active),
    )


def import_errors(site: Site, request: Request) -> Response:
    """Files that failed to load, then the warnings of the files that loaded."""
    with site.store.read() as conn:
        errors = dag_reads.import_errors(conn)
        warnings = dag_reads.file_warnings(conn)
    return _page(site, "errors.html", request, errors=errors, warnings=warnings)


def grid(site: Site, request: Request, dag_id: str) -> Response:
    query = request.query
    view = read_grid(site.store, dag_id, Paging.from_query(query), GridShape.from_query(query))
    return _dag_page(
        site,
        "grid.html",
        request,
        view.dag,
        grid=view,
        page_sizes=(DEFAULT_RUNS_PER_PAGE, 50, MAX_RUNS_PER_PAGE),
        refresh=_refresh(site, request, view.active),
    )


def run(site: Site, request: Request, dag_id: str, run_id: str) -> Response:
    view = read_run(site.store, dag_id, run_id)
    return _run_page(
        site,
        "run.html",
        request,
        view.dag,
        view.run,
        lines=view.lines,
        callbacks=read_callbacks(site.store, dag_id, view.run),
    )


def graph(site: Site, request: Request, dag_id: str) -> Response:
    """The DAG as boxes and arrows; ``?run=RUN_ID`` colours the boxes by that run."""
    view = read_graph(site.store, dag_id, request.query.get("run") or None)
    active = view.run is not None and RunState(view.run.state).active
    return _dag_page(
        site,
        "graph.html",
        request,
        view.dag,
        graph=view,
        refresh=_refresh(site, request, active),
    )


def callback_log(
    site: Site, request: Request, dag_id: str, run_id: str, callback_id: str
) -> Response:
    """A callback's log: what its callables printed, as ``dagrun logs`` shows after a try."""
    found = read_callback(site.store, dag_id, run_id, int(callback_id))
    text = read_log(found.source, site.logs_root, site.log_tail_bytes)
    return _dag_page(
        site,
        "callback_log.html",
        request,
        found.dag,
        run=found.run,
        call=found.line,
        log=text,
    )


def assets(site: Site, request: Request) -> Response:
    """Every asset: who produces it, which DAGs wait for it, its latest partition."""
    return _page(site, "assets.html", request, assets=read_assets(site.store))


def dag_assets(site: Site, request: Request, dag_id: str) -> Response:
    """The assets a DAG waits for (and what it consumed of them) and those it produces."""
    view = read_dag_assets(site.store, dag_id)
    return _dag_page(site, "dag_assets.html", request, view.dag, view=view)


def log(
    site: Site, request: Request, dag_id: str, run_id: str, task_id: str, try_number: str
) -> Response:
    index = _map_index(request)
    with site.store.read() as conn:
        info = read_dag(site.store, conn, dag_id)
        dag_run = run_reads.run_by_id(conn, dag_id, run_id)
        try:
            instance = task_reads.task_instance(conn, dag_run, task_id, index)
        except task_reads.MappedTaskError as exc:
            raise BadRequest(f"{exc} (?map_index=N)") from None
        others = task_reads.attempts(conn, instance.id)
        attempt = task_reads.attempt(
            conn, dag_id, dag_run.id, task_id, int(try_number), instance.id
        )
    text = read_log(attempt, site.logs_root, site.log_tail_bytes)
    return _dag_page(
        site,
        "log.html",
        request,
        info,
        run=dag_run,
        attempt=attempt,
        attempts=others,
        map_index=instance.map_index,
        log=text,
        refresh=_refresh(site, request, attempt.ended_at is None),
    )


def _map_index(request: Request) -> int | None:
    """The index of a mapped task a page is about (``?map_index=N``), if given."""
    value = request.query.get("map_index")
    if value is None:
        return None
    if not value.isdigit() or len(value) > 9:
        raise BadRequest(f"map_index must be a whole number, not {value!r}")
    return int(value)


def audit_log(site: Site, request: Request, dag_id: str | None = None) -> Response:
    """Operator actions, newest first: trigger, cancel, mark, clear, backfill, pause..."""
    entries = read_audit(site.store, dag_id, request.query.get("limit"))
    return _page(site, "audit.html", request, entries=entries, dag_id=dag_id)


def gantt(site: Site, request: Request, dag_id: str, run_id: str) -> Response:
    """A run's task instances on a time axis, its critical path marked."""
    view = read_gantt(site.store, dag_id, run_id)
    return _run_page(site, "gantt.html", request, view.dag, view.run, gantt=view)


def durations(site: Site, request: Request, dag_id: str) -> Response:
    """How long the last N runs and their tasks took (``?runs=N``), slower tasks flagged."""
    chart = read_durations(site.store, dag_id, runs_param(request.query.get("runs")))
    return _dag_page(
        site,
        "durations.html",
        request,
        chart.dag,
        chart=chart,
        run_counts=(10, 25, 50, 100, MAX_RUNS),
    )


def static(site: Site, request: Request, name: str) -> Response:
    found = site.static_files.get(name)
    if found is None:
        raise NotFound(f"no static file {name}")
    body, kind = found
    return Response(body, kind, cache="public, max-age=86400")

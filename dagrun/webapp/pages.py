"""The HTML pages: DAG list, import errors and warnings, run grid, run, a run's Gantt,
durations over time, a DAG's source, a task instance's values, attempt log (followed while
it runs), variables, connections and pools, audit log, and static files.

Each handler is called as ``handler(site, request, **url_params)`` and returns a Response; a
missing DAG, run, task or try raises and becomes a 404 page in ``WebApp.respond``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dagrun.states import RunState
from dagrun.store import dag_reads, run_reads, task_reads
from dagrun.webapp import live_log
from dagrun.webapp.asset_views import read_assets, read_dag_assets
from dagrun.webapp.callback_views import read_callback, read_callbacks
from dagrun.webapp.config_views import read_connections, read_pools, read_variables
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
from dagrun.webapp.source_view import read_source
from dagrun.webapp.templates import render
from dagrun.webapp.values_view import download_name, read_value, read_values, task_instance_of

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
    """An attempt's log; a running attempt's as far as it is written, which the page then
    follows as it grows (``live_log``, ``follow_log.js``) instead of refreshing."""
    index = _map_index(request)
    with site.store.read() as conn:
        info = read_dag(site.store, conn, dag_id)
        dag_run = run_reads.run_by_id(conn, dag_id, run_id)
        instance = task_instance_of(conn, dag_run, task_id, index)
        others = task_reads.attempts(conn, instance.id)
        attempt = task_reads.attempt(
            conn, dag_id, dag_run.id, task_id, int(try_number), instance.id
        )
    running = attempt.ended_at is None
    name = live_log.AttemptName(dag_id, task_id, instance.map_index)
    return _dag_page(
        site,
        "log.html",
        request,
        info,
        run=dag_run,
        attempt=attempt,
        attempts=others,
        map_index=instance.map_index,
        log=None if running else read_log(attempt, site.logs_root, site.log_tail_bytes),
        live=live_log.follow(attempt, name, site.logs_root, 0, site.log_tail_bytes)
        if running
        else None,
    )


def _map_index(request: Request) -> int | None:
    """The index of a mapped task a page is about (``?map_index=N``), if given."""
    value = request.query.get("map_index")
    if value is None:
        return None
    if not value.isdigit() or len(value) > 9:
        raise BadRequest(f"map_index must be a whole number, not {value!r}")
    return int(value)


def values(site: Site, request: Request, dag_id: str, run_id: str, task_id: str) -> Response:
    """What a task instance returned (TaskFlow) and pushed (XComs), as indented JSON."""
    view = read_values(site.store, dag_id, run_id, task_id, _map_index(request))
    return _dag_page(site, "values.html", request, view.dag, run=view.run, view=view)


def value_download(
    site: Site, request: Request, dag_id: str, run_id: str, task_id: str
) -> Response:
    """One value a task instance left (``?key=``), whole, as a JSON file to save."""
    key = request.query.get("key")
    if not key:
        raise BadRequest("name the value with ?key= (return_value for what the task returned)")
    index = _map_index(request)
    text = read_value(site.store, dag_id, run_id, task_id, index, key)
    name = download_name(task_id, key, -1 if index is None else index)
    return Response(
        text.encode(),
        "application/json; charset=utf-8",
        headers=[("Content-Disposition", f'attachment; filename="{name}"')],
    )


def source(site: Site, request: Request, dag_id: str) -> Response:
    """A DAG's source as its last good parse read it, highlighted, with its file's error."""
    view = read_source(site.store, dag_id)
    return _dag_page(site, "source.html", request, view.dag, view=view)


def variables(site: Site, request: Request) -> Response:
    """The stored variables; the values of keys naming a secret as ``***``."""
    return _page(site, "variables.html", request, variables=read_variables(site.store))


def connections(site: Site, request: Request) -> Response:
    """The stored connections; passwords and sensitive extra fields as ``***``."""
    return _page(site, "connections.html", request, connections=read_connections(site.store))


def pools(site: Site, request: Request) -> Response:
    """The pools with their slots and the tasks running and queued in them."""
    return _page(site, "pools.html", request, pools=read_pools(site.store))


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

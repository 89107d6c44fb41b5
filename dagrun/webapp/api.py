"""The JSON API under ``/api`` and the ``/healthz`` probe.

The documents are built from the same view models as the HTML pages, so the API mirrors them;
every instant is ISO 8601 in UTC, with the DAG's local time alongside where the page shows it.
Each handler returns one of the TypedDicts of ``documents`` and is declared once in
``API_ROUTES``, which both routes requests and makes ``/api/openapi.json``.
"""

from __future__ import annotations

import logging
import re
from functools import cache
from typing import TYPE_CHECKING, Any, cast
from zoneinfo import ZoneInfo

from dagrun.states import RunState
from dagrun.store import dag_reads, run_reads
from dagrun.store.assets import AssetJson
from dagrun.store.audit import AuditEntryJson
from dagrun.store.run_reads import RunRow
from dagrun.timing.instants import iso, local_iso
from dagrun.webapp import openapi
from dagrun.webapp.asset_views import dag_assets_json, read_assets, read_dag_assets
from dagrun.webapp.callback_views import callback_json, read_callbacks
from dagrun.webapp.documents import (
    DagAssetsJson,
    DagJson,
    DagListJson,
    GraphJson,
    GridCellJson,
    GridJson,
    GridTaskJson,
    ImportErrorJson,
    ImportWarningJson,
    LogTailJson,
    RunDetailJson,
    RunJson,
    RunPageJson,
    TaskInstanceJson,
)
from dagrun.webapp.grid import GridCell, GridRow, GridShape
from dagrun.webapp.http import BadRequest, Request, Response, json_response
from dagrun.webapp.live_log import read_tail
from dagrun.webapp.models import (
    AUDIT_DEFAULT,
    AUDIT_LIMIT,
    DagInfo,
    GridView,
    TaskLine,
    read_audit,
    read_dag,
    read_dag_list,
    read_graph,
    read_grid,
    read_run,
)
from dagrun.webapp.openapi import ApiRoute, Param
from dagrun.webapp.paging import DEFAULT_RUNS_PER_PAGE, MAX_RUNS_PER_PAGE, Paging
from dagrun.webapp.urls import log_url

if TYPE_CHECKING:
    from dagrun.webapp.app import Site

log = logging.getLogger("dagrun.web")


# ---------------------------------------------------------------- routes


def api_dags(site: Site, request: Request) -> DagListJson:
    """The active DAGs, each with its next run and newest runs.

    ``import_errors`` counts the DAG files whose last parse failed (``/api/import-errors``).
    """
    with site.store.read() as conn:
        infos, recent, errors = read_dag_list(site.store, conn)
    return {"dags": [dag_json(i, recent[i.dag_id]) for i in infos], "import_errors": errors}


def api_import_errors(site: Site, request: Request) -> list[ImportErrorJson]:
    """Each DAG file whose last parse failed, with its error and the line it names."""
    with site.store.read() as conn:
        errors = dag_reads.import_errors(conn)
    # The store lists only the files with an error.
    return [{"file": e.path, "error": e.error or "", "line": e.error_line} for e in errors]


def api_import_warnings(site: Site, request: Request) -> list[ImportWarningJson]:
    """Each warning of the DAG files that loaded (an Airflow argument dagrun ignores)."""
    with site.store.read() as conn:
        warned = dag_reads.file_warnings(conn)
    return [
        {"file": f.path, "line": w.line, "message": w.message} for f in warned for w in f.warnings
    ]


def api_audit(site: Site, request: Request) -> list[AuditEntryJson]:
    """The audit log, newest first: who triggered, cleared, marked or paused what, and when."""
    return [e.to_json() for e in read_audit(site.store, None, request.query.get("limit"))]


def api_dag_audit(site: Site, request: Request, dag_id: str) -> list[AuditEntryJson]:
    """The audit log of one DAG, newest first."""
    return [e.to_json() for e in read_audit(site.store, dag_id, request.query.get("limit"))]


def api_grid(site: Site, request: Request, dag_id: str) -> GridJson:
    """The grid: a page of runs (oldest first) and each task's state in each of them."""
    query = request.query
    view = read_grid(site.store, dag_id, Paging.from_query(query), GridShape.from_query(query))
    return grid_json(view)


def api_graph(site: Site, request: Request, dag_id: str) -> GraphJson:
    """The graph page's boxes, arrows and group frames; ``?run=`` gives the boxes states."""
    view = read_graph(site.store, dag_id, request.query.get("run") or None)
    run_id = view.run.run_id if view.run is not None else None
    return {"dag_id": dag_id, "run_id": run_id, **view.picture.to_json()}


def api_runs(site: Site, request: Request, dag_id: str) -> RunPageJson:
    """The DAG's runs, newest first, a page at a time; ``?state=`` keeps runs in that state."""
    paging = Paging.from_query(request.query)
    state = request.query.get("state") or None
    with site.store.read() as conn:
        info = read_dag(site.store, conn, dag_id)
        runs, older = run_reads.run_page(conn, dag_id, paging.before, paging.runs, state)
    tz = info.spec.timetable.tz
    return {"runs": [run_json(r, tz) for r in runs], "older_before": iso(older)}


def api_run(site: Site, request: Request, dag_id: str, run_id: str) -> RunDetailJson:
    """A run with each of its task instances, their attempts, and its callbacks."""
    view = read_run(site.store, dag_id, run_id)
    return {
        **run_json(view.run, view.dag.spec.timetable.tz),
        "tasks": [task_json(dag_id, view.run, line) for line in view.lines],
        "callbacks": [callback_json(c) for c in read_callbacks(site.store, dag_id, view.run)],
    }


def api_log_tail(
    site: Site, request: Request, dag_id: str, run_id: str, task_id: str, try_number: str
) -> LogTailJson:
    """What an attempt's log holds after byte ``?offset=``: the log page of a running
    attempt follows its log with it."""
    ids = (dag_id, run_id, task_id, int(try_number))
    index = _whole_number(request.query, "map_index", MAX_INDEX_DIGITS)
    since = _whole_number(request.query, "offset", MAX_OFFSET_DIGITS) or 0
    chunk = read_tail(site.store, site.logs_root, ids, index, since, site.log_tail_bytes)
    return {
        "text": chunk.text,
        "offset": chunk.offset,
        "skipped": chunk.skipped,
        "running": chunk.running,
        "found": chunk.found,
    }


def _whole_number(query: dict[str, str], name: str, digits: int) -> int | None:
    value = query.get(name)
    if value is None:
        return None
    if not re.fullmatch(rf"[0-9]{{1,{digits}}}", value):
        raise BadRequest(f"{name} must be a whole number, not {value!r}")
    return int(value)


def api_assets(site: Site, request: Request) -> list[AssetJson]:
    """Every asset, as ``dagrun assets list --json`` prints it."""
    return [r.to_json() for r in read_assets(site.store)]


def api_dag_assets(site: Site, request: Request, dag_id: str) -> DagAssetsJson:
    """The assets the DAG is scheduled on and those its tasks produce."""
    return dag_assets_json(read_dag_assets(site.store, dag_id))


def api_openapi(site: Site, request: Request) -> dict[str, Any]:
    """This description of the API (OpenAPI 3.1)."""
    return _description()


@cache
def _description() -> dict[str, Any]:
    return openapi.document(API_ROUTES)


def healthz(site: Site, request: Request) -> Response:
    """200 when the database answers a read, 503 (not a 500 page) when it does not."""
    try:
        with site.store.read() as conn:
            version = site.store.schema_version(conn)
    except Exception as exc:
        log.warning("health check failed: %s", exc)
        return json_response({"status": "error", "error": "database unavailable"}, 503)
    return json_response(
        {"status": "ok", "database": site.store.dialect, "schema_version": version}
    )


# ---------------------------------------------------------------- JSON shapes


def dag_json(info: DagInfo, recent: list[RunRow]) -> DagJson:
    tz = info.spec.timetable.tz
    upcoming = info.next_logical_date
    return {
        "dag_id": info.dag_id,
        "description": info.spec.description,
        "schedule": info.spec.schedule_text,
        "timezone": info.spec.timezone,
        "paused": info.is_paused,
        "active": info.is_active,
        "import_error": info.error,
        "fileloc": info.fileloc,
        "tags": list(info.spec.tags),
        "tasks": [t.task_id for t in info.spec.tasks],
        "next_logical_date": iso(upcoming),
        "local_next_logical_date": local_iso(upcoming, tz) if upcoming else None,
        "next_due_at": iso(info.next_due),
        "local_next_due_at": local_iso(info.next_due, tz) if info.next_due else None,
        "recent_runs": [run_json(r, tz) for r in recent],
    }


def run_json(run: RunRow, tz: ZoneInfo) -> RunJson:
    return {
        "run_id": run.run_id,
        "logical_date": iso(run.logical_date),
        "local_logical_date": local_iso(run.logical_date, tz),
        "data_interval_start": iso(run.data_interval_start),
        "data_interval_end": iso(run.data_interval_end),
        "state": run.state,
        "run_type": run.run_type,
        "start_date": iso(run.start_date),
        "end_date": iso(run.end_date),
        "duration": run.duration,
        "conf": run.conf,
    }


def task_json(dag_id: str, run: RunRow, line: TaskLine) -> TaskInstanceJson:
    ti = line.instance
    return {
        "task_id": line.task_id,
        "map_index": line.map_index,
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
                "log_url": log_url(dag_id, run.run_id, line.task_id, a.try_number, line.map_index),
            }
            for a in line.attempts
        ],
    }


def _task_row_json(row: GridRow) -> GridTaskJson:
    return {
        "task_id": row.task_id,
        "removed": row.removed,
        "group": row.group or None,
        "mapped": row.kind == "mapped",
        "cells": [_cell_json(c) for c in _task_cells(row)],
    }


def _task_cells(row: GridRow) -> list[GridCell]:
    """The cells of a task or index row: only a group row holds group cells."""
    assert row.kind != "group"
    return cast("list[GridCell]", row.cells)


def _cell_json(cell: GridCell) -> GridCellJson:
    document: GridCellJson = {
        "run_id": cell.run_id,
        "state": cell.state,
        "try_number": cell.try_number,
        "max_tries": cell.max_tries,
        "duration": cell.duration,
    }
    if cell.counts:
        document["counts"] = dict(cell.counts)
    return document


def grid_json(grid: GridView) -> GridJson:
    """The grid's rows whatever is folded: tasks (a mapped one with its ``counts`` by state
    per run, and its ``indexes`` when ``?expand=`` names it) and the groups they sit in."""
    tz = grid.dag.spec.timetable.tz
    tasks: list[GridTaskJson] = []
    for row in grid.rows:
        if row.kind == "index":
            tasks[-1].setdefault("indexes", []).append(
                {"map_index": row.map_index, "cells": [_cell_json(c) for c in _task_cells(row)]}
            )
        elif row.kind != "group":
            tasks.append(_task_row_json(row))
    return {
        "dag_id": grid.dag.dag_id,
        "timezone": grid.dag.spec.timezone,
        "runs": [run_json(c.run, tz) for c in grid.columns],
        "tasks": tasks,
        "groups": [
            {
                "group": row.task_id,
                "parent": row.group or None,
                "cells": [
                    {"run_id": c.run_id, "state": c.state, "counts": dict(c.counts)}
                    for c in row.cells
                ],
            }
            for row in grid.rows
            if row.kind == "group"
        ],
        "page": {
            "runs": grid.paging.runs,
            "before": iso(grid.paging.before),
            "older_before": iso(grid.page.older_before),
            "has_newer": grid.page.has_newer,
            "newer_before": iso(grid.page.newer_before),
        },
    }


# ---------------------------------------------------------------- the route table

#: The digits of a log's byte offset and of a map index (the store's integers hold them).
MAX_OFFSET_DIGITS = 18
MAX_INDEX_DIGITS = 9

_PAGING = (
    Param(
        "runs",
        {"type": "integer", "minimum": 1, "maximum": MAX_RUNS_PER_PAGE},
        f"Runs per page (default {DEFAULT_RUNS_PER_PAGE}; more than {MAX_RUNS_PER_PAGE} "
        "count as that many).",
    ),
    Param(
        "before",
        {"type": "string", "format": "date-time"},
        "Show runs with a logical date before this instant (the page's ``older_before``).",
    ),
)
_AUDIT_LIMIT = Param(
    "limit",
    {"type": "integer", "minimum": 1, "maximum": AUDIT_LIMIT},
    f"Entries at most (default {AUDIT_DEFAULT}, at most {AUDIT_LIMIT}).",
)

#: Every ``/api`` route, in the order the router tries them.
API_ROUTES = [
    ApiRoute("/api/openapi.json", api_openapi),
    ApiRoute("/api/dags", api_dags),
    ApiRoute("/api/import-errors", api_import_errors),
    ApiRoute("/api/import-warnings", api_import_warnings),
    ApiRoute("/api/audit", api_audit, (_AUDIT_LIMIT,)),
    ApiRoute("/api/dags/{dag_id}/audit", api_dag_audit, (_AUDIT_LIMIT,)),
    ApiRoute("/api/assets", api_assets),
    ApiRoute("/api/dags/{dag_id}/assets", api_dag_assets),
    ApiRoute(
        "/api/dags/{dag_id}/grid",
        api_grid,
        (
            *_PAGING,
            Param("fold", {"type": "string"}, "Task groups folded, comma-separated."),
            Param(
                "expand",
                {"type": "string"},
                "Mapped tasks whose indexes get rows of their own, comma-separated.",
            ),
        ),
    ),
    ApiRoute(
        "/api/dags/{dag_id}/graph",
        api_graph,
        (Param("run", {"type": "string"}, "The run whose states colour the boxes."),),
    ),
    ApiRoute(
        "/api/dags/{dag_id}/runs",
        api_runs,
        (
            *_PAGING,
            Param(
                "state",
                {"type": "string", "enum": [s.value for s in RunState]},
                "Only the runs in this state.",
            ),
        ),
    ),
    # Before the run's route, whose run id would take the rest of the path.
    ApiRoute(
        "/api/dags/{dag_id}/runs/{run_id}/tasks/{task_id}/tries/{try_number}/log",
        api_log_tail,
        (
            Param(
                "offset",
                {"type": "integer", "minimum": 0, "maximum": 10**MAX_OFFSET_DIGITS - 1},
                "The byte of the attempt's output to read from (default 0: the start); the "
                "last answer's ``offset`` reads on from where it ended.",
            ),
            Param(
                "map_index",
                {"type": "integer", "minimum": 0, "maximum": 10**MAX_INDEX_DIGITS - 1},
                "The index of a mapped task's instance.",
            ),
        ),
    ),
    ApiRoute("/api/dags/{dag_id}/runs/{run_id}", api_run),
]

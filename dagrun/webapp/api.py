"""The JSON API under ``/api`` and the ``/healthz`` probe.

The documents are built from the same view models as the HTML pages, so the API mirrors them;
every instant is ISO 8601 in UTC, with the DAG's local time alongside where the page shows it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, cast
from zoneinfo import ZoneInfo

from dagrun.store import dag_reads, run_reads
from dagrun.store.run_reads import RunRow
from dagrun.timing.instants import iso
from dagrun.webapp.asset_views import dag_assets_json, read_assets, read_dag_assets
from dagrun.webapp.callback_views import callback_json, read_callbacks
from dagrun.webapp.grid import GridCell, GridRow, GridShape
from dagrun.webapp.http import Request, Response, json_response
from dagrun.webapp.models import (
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
from dagrun.webapp.paging import Paging
from dagrun.webapp.urls import log_url

if TYPE_CHECKING:
    from dagrun.webapp.app import Site

log = logging.getLogger("dagrun.web")


# ---------------------------------------------------------------- routes


def api_dags(site: Site, request: Request) -> Response:
    with site.store.read() as conn:
        infos, recent, errors = read_dag_list(site.store, conn)
    return json_response(
        {
            "dags": [dag_json(i, recent[i.dag_id]) for i in infos],
            "import_errors": errors,
        }
    )


def api_import_errors(site: Site, request: Request) -> Response:
    with site.store.read() as conn:
        errors = dag_reads.import_errors(conn)
    return json_response([{"file": e.path, "error": e.error, "line": e.error_line} for e in errors])


def api_import_warnings(site: Site, request: Request) -> Response:
    """Each warning of the DAG files that loaded: ``[{"file", "line", "message"}]``."""
    with site.store.read() as conn:
        warned = dag_reads.file_warnings(conn)
    return json_response(
        [{"file": f.path, "line": w.line, "message": w.message} for f in warned for w in f.warnings]
    )


def api_audit(site: Site, request: Request, dag_id: str | None = None) -> Response:
    """The audit log, newest first (``?limit=``, at most 1000), of one DAG or of all."""
    entries = read_audit(site.store, dag_id, request.query.get("limit"))
    return json_response([e.to_json() for e in entries])


def api_grid(site: Site, request: Request, dag_id: str) -> Response:
    query = request.query
    view = read_grid(site.store, dag_id, Paging.from_query(query), GridShape.from_query(query))
    return json_response(grid_json(view))


def api_graph(site: Site, request: Request, dag_id: str) -> Response:
    """The graph page's boxes, arrows and group frames; ``?run=`` gives the boxes states."""
    view = read_graph(site.store, dag_id, request.query.get("run") or None)
    run_id = view.run.run_id if view.run is not None else None
    return json_response({"dag_id": dag_id, "run_id": run_id, **view.picture.to_json()})


def api_runs(site: Site, request: Request, dag_id: str) -> Response:
    paging = Paging.from_query(request.query)
    state = request.query.get("state") or None
    with site.store.read() as conn:
        info = read_dag(site.store, conn, dag_id)
        runs, older = run_reads.run_page(conn, dag_id, paging.before, paging.runs, state)
    tz = info.spec.timetable.tz
    return json_response({"runs": [run_json(r, tz) for r in runs], "older_before": iso(older)})


def api_run(site: Site, request: Request, dag_id: str, run_id: str) -> Response:
    view = read_run(site.store, dag_id, run_id)
    document = run_json(view.run, view.dag.spec.timetable.tz)
    document["tasks"] = [task_json(dag_id, view.run, line) for line in view.lines]
    document["callbacks"] = [callback_json(c) for c in read_callbacks(site.store, dag_id, view.run)]
    return json_response(document)


def api_assets(site: Site, request: Request) -> Response:
    """Every asset, as ``dagrun assets list --json`` prints it."""
    return json_response([r.to_json() for r in read_assets(site.store)])


def api_dag_assets(site: Site, request: Request, dag_id: str) -> Response:
    return json_response(dag_assets_json(read_dag_assets(site.store, dag_id)))


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
        "import_error": info.error,
        "fileloc": info.fileloc,
        "tags": list(info.spec.tags),
        "tasks": [t.task_id for t in info.spec.tasks],
        "next_logical_date": iso(upcoming),
        "local_next_logical_date": upcoming.astimezone(tz).isoformat() if upcoming else None,
        "next_due_at": iso(info.next_due),
        "local_next_due_at": info.next_due.astimezone(tz).isoformat() if info.next_due else None,
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
        "conf": run.conf,
    }


def task_json(dag_id: str, run: RunRow, line: TaskLine) -> dict[str, Any]:
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


def _task_row_json(row: GridRow) -> dict[str, Any]:
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


def _cell_json(cell: GridCell) -> dict[str, Any]:
    document = {
        "run_id": cell.run_id,
        "state": cell.state,
        "try_number": cell.try_number,
        "max_tries": cell.max_tries,
        "duration": cell.duration,
    }
    if cell.counts:
        document["counts"] = dict(cell.counts)
    return document


def grid_json(grid: GridView) -> dict[str, Any]:
    """The grid's rows whatever is folded: tasks (a mapped one with its ``counts`` by state
    per run, and its ``indexes`` when ``?expand=`` names it) and the groups they sit in."""
    tz = grid.dag.spec.timetable.tz
    tasks: list[dict[str, Any]] = []
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

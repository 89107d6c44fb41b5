"""The URLs of the pages, built from ids: every id is percent-encoded, never trusted as a path."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from dagrun.webapp.http import Request


def _q(value: str) -> str:
    return quote(value, safe="")


def grid_url(dag_id: str, **query: Any) -> str:
    params = {k: v for k, v in query.items() if v is not None}
    return f"/dags/{_q(dag_id)}/grid" + (f"?{urlencode(params)}" if params else "")


def run_url(dag_id: str, run_id: str) -> str:
    return f"/dags/{_q(dag_id)}/runs/{_q(run_id)}"


def graph_url(dag_id: str, run_id: str | None = None) -> str:
    """The DAG's graph; with ``run_id``, its boxes coloured by that run (``?run=``)."""
    path = f"/dags/{_q(dag_id)}/graph"
    return f"{path}?{urlencode({'run': run_id})}" if run_id is not None else path


def gantt_url(dag_id: str, run_id: str) -> str:
    return f"{run_url(dag_id, run_id)}/gantt"


def durations_url(dag_id: str) -> str:
    return f"/dags/{_q(dag_id)}/durations"


def audit_url(dag_id: str | None = None) -> str:
    return f"/dags/{_q(dag_id)}/audit" if dag_id else "/audit"


def assets_url(dag_id: str | None = None) -> str:
    """The assets one DAG waits for and produces; every asset without ``dag_id``."""
    return f"/dags/{_q(dag_id)}/assets" if dag_id else "/assets"


def callback_log_url(dag_id: str, run_id: str, callback_id: int) -> str:
    return f"{run_url(dag_id, run_id)}/callbacks/{callback_id}/log"


def log_url(dag_id: str, run_id: str, task_id: str, try_number: int, map_index: int = -1) -> str:
    """An attempt's log page; a mapped task's instance is named by ``?map_index=``."""
    path = f"{run_url(dag_id, run_id)}/tasks/{_q(task_id)}/tries/{try_number}/log"
    return f"{path}?map_index={map_index}" if map_index >= 0 else path


def log_tail_url(
    dag_id: str, run_id: str, task_id: str, try_number: int, map_index: int = -1
) -> str:
    """What an attempt's log holds after a byte offset (``&offset=N``), as JSON: the log
    page of a running attempt follows it."""
    return f"/api{log_url(dag_id, run_id, task_id, try_number, map_index)}"


def source_url(dag_id: str) -> str:
    """A DAG's source, as its last good parse read it."""
    return f"/dags/{_q(dag_id)}/source"


def values_url(dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> str:
    """What a task instance returned and pushed (XComs)."""
    path = f"{run_url(dag_id, run_id)}/tasks/{_q(task_id)}/values"
    return f"{path}?map_index={map_index}" if map_index >= 0 else path


def value_download_url(
    dag_id: str, run_id: str, task_id: str, key: str, map_index: int = -1
) -> str:
    """One value a task instance left, whole, as a JSON file."""
    query = {"key": key, **({"map_index": map_index} if map_index >= 0 else {})}
    return f"{run_url(dag_id, run_id)}/tasks/{_q(task_id)}/values/download?{urlencode(query)}"


def url_with(request: Request, **changes: Any) -> str:
    """This page's URL with some query parameters changed (None removes one)."""
    query = {k: v for k, v in {**request.query, **changes}.items() if v is not None}
    return quote(request.path, safe="/") + (f"?{urlencode(query)}" if query else "")

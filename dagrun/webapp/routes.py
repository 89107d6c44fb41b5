"""The URL table: which handler answers which path, and the ids each path names.

Ids are limited to safe characters; a log is named by (dag, run, task, try), never by a path.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from dagrun.webapp import api, health, metrics, pages
from dagrun.webapp.http import NotFound, Response
from dagrun.webapp.openapi import ID_CHARS, RUN_ID_CHARS, TRY_CHARS

#: Called as ``handler(site, request, **params)`` with the path's named groups as params.
Handler = Callable[..., Response]

_ID = rf"(?P<{{}}>{ID_CHARS})"
_DAG = _ID.format("dag_id")
_RUN = rf"(?P<run_id>{RUN_ID_CHARS})"
_LOG = (
    rf"/dags/{_DAG}/runs/{_RUN}/tasks/{_ID.format('task_id')}/tries/(?P<try_number>{TRY_CHARS})/log"
)
_CALLBACK_LOG = rf"/dags/{_DAG}/runs/{_RUN}/callbacks/(?P<callback_id>\d{{1,9}})/log"
_VALUES = rf"/dags/{_DAG}/runs/{_RUN}/tasks/{_ID.format('task_id')}/values"
_TABLE: list[tuple[str, Handler]] = [
    (r"/", pages.dag_list),
    (r"/import-errors", pages.import_errors),
    (r"/audit", pages.audit_log),
    (rf"/dags/{_DAG}/audit", pages.audit_log),
    (rf"/dags/{_DAG}/durations", pages.durations),
    (r"/assets", pages.assets),
    (r"/pools", pages.pools),
    (r"/variables", pages.variables),
    (r"/connections", pages.connections),
    (rf"/dags/{_DAG}/source", pages.source),
    (rf"/dags/{_DAG}/assets", pages.dag_assets),
    (rf"/dags/{_DAG}/graph", pages.graph),
    (rf"/dags/{_DAG}(?:/grid)?", pages.grid),
    (_LOG, pages.log),
    (_VALUES, pages.values),
    (rf"{_VALUES}/download", pages.value_download),
    (rf"/dags/{_DAG}/runs/{_RUN}/gantt", pages.gantt),
    (_CALLBACK_LOG, pages.callback_log),
    (rf"/dags/{_DAG}/runs/{_RUN}", pages.run),
    (r"/static/(?P<name>[A-Za-z0-9_.-]+)", pages.static),
    # Each /api route is declared once, for the router and for /api/openapi.json alike.
    *[(r.pattern, r.respond) for r in api.API_ROUTES],
    (r"/healthz", api.healthz),
    (r"/health", health.health),
    (r"/metrics", metrics.metrics),
]
ROUTES: list[tuple[re.Pattern[str], Handler]] = [
    (re.compile(pattern), handler) for pattern, handler in _TABLE
]


def route(path: str) -> tuple[Handler, dict[str, str]]:
    """The first handler whose pattern matches the whole path, and the ids it names."""
    for pattern, handler in ROUTES:
        match = pattern.fullmatch(path)
        if match:
            return handler, match.groupdict()
    raise NotFound(f"no page at {path}")

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

Modules: ``app`` (the WSGI callable, its error pages, and the ``Site`` every handler gets),
``http`` (requests, responses, HTTP errors), ``routes`` (the URL table), ``urls`` and
``formatting`` (what the templates print), ``paging`` and ``models`` (the shared view models,
read through the store's ``*_reads`` modules), ``asset_views`` and ``callback_views`` (the
view models of assets and of callbacks), ``grid``, ``graph_view``, ``gantt`` and
``durations`` (the pictures), ``pages`` (HTML), ``api`` (JSON and ``/healthz``: its route
table), ``documents`` (the JSON documents ``/api`` answers with, as TypedDicts), ``openapi``
(what a route declares, and ``/api/openapi.json`` made of it), ``metrics``
(Prometheus), ``logs`` (safe log reading), ``templates`` (Jinja and static files),
``server`` (waitress: bounded threads, idle connections closed).
"""

from __future__ import annotations

from dagrun.webapp.app import LOG_TAIL_BYTES, Site, WebApp
from dagrun.webapp.logs import LogText, read_log
from dagrun.webapp.server import WebServer, make_web_server
from dagrun.webapp.urls import grid_url, log_url, run_url

__all__ = [
    "LOG_TAIL_BYTES",
    "LogText",
    "Site",
    "WebApp",
    "WebServer",
    "grid_url",
    "log_url",
    "make_web_server",
    "read_log",
    "run_url",
]

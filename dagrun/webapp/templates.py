"""The Jinja2 templates and static files shipped in ``dagrun.web``, and rendering a page.

Every string that came from a DAG file, an error or a log is escaped by Jinja's autoescape.
"""

from __future__ import annotations

import functools
import hashlib
import mimetypes
from http import HTTPStatus
from importlib.resources import files
from typing import TYPE_CHECKING, Any

from jinja2 import Environment, PackageLoader, StrictUndefined

from dagrun.states import TaskState
from dagrun.timing.instants import iso
from dagrun.webapp import source_view
from dagrun.webapp.formatting import fmt_duration, local, utc
from dagrun.webapp.health import scheduler_stall
from dagrun.webapp.http import Request, Response
from dagrun.webapp.urls import (
    assets_url,
    audit_url,
    durations_url,
    gantt_url,
    graph_url,
    grid_url,
    log_tail_url,
    log_url,
    run_url,
    source_url,
    url_with,
    value_download_url,
    values_url,
)

if TYPE_CHECKING:
    from dagrun.store import Store

StaticFiles = dict[str, tuple[bytes, str]]


def load_static() -> StaticFiles:
    """Static files read once into memory: a request names a file, never a path. The
    colours of a DAG's source are made from Pygments' styles here."""
    folder = files("dagrun.web").joinpath("static")
    found = {source_view.STYLESHEET: (source_view.stylesheet(), "text/css")}
    for entry in folder.iterdir():
        if entry.is_file():
            kind = mimetypes.guess_type(entry.name)[0] or "application/octet-stream"
            found[entry.name] = (entry.read_bytes(), kind)
    return found


def environment(static_files: StaticFiles, store: Store) -> Environment:
    """The template environment, its static links versioned by content for caching; the
    base template asks ``scheduler_stall()`` for its banner (one indexed read a page)."""
    env = Environment(
        loader=PackageLoader("dagrun.web", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    versions = {n: hashlib.sha1(b).hexdigest()[:10] for n, (b, _) in static_files.items()}
    env.globals.update(
        grid_url=grid_url,
        graph_url=graph_url,
        run_url=run_url,
        log_url=log_url,
        audit_url=audit_url,
        gantt_url=gantt_url,
        durations_url=durations_url,
        assets_url=assets_url,
        source_url=source_url,
        values_url=values_url,
        value_download_url=value_download_url,
        log_tail_url=log_tail_url,
        static=lambda name: f"/static/{name}?v={versions[name]}",
        states=[s.value for s in TaskState],
        scheduler_stall=functools.partial(scheduler_stall, store),
    )
    env.filters.update(local=local, utc=utc, iso=iso, duration=fmt_duration)
    return env


def render(
    env: Environment,
    template: str,
    request: Request,
    status: int = HTTPStatus.OK,
    refresh: int = 0,
    **context: Any,
) -> Response:
    body = env.get_template(template).render(
        request=request,
        self_url=lambda **changes: url_with(request, **changes),
        refresh=refresh,
        **context,
    )
    return Response(body.encode(), status=status)

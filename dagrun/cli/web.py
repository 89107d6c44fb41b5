"""``dagrun web``: serve the read-only run grid page and JSON API.

The address is bound before the database is opened, so a busy port or a host name that does
not resolve is bad input (exit 2, one line) and costs no schema check.
"""

from __future__ import annotations

import logging
import threading

import click

from dagrun.cli.app import App, pass_app, stop_signals
from dagrun.cli.log_setup import setup_logging
from dagrun.webapp import WebApp
from dagrun.webapp.server import IDLE_SECONDS, WebServer, bind_listener

log = logging.getLogger("dagrun.web")


@click.command("web")
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on (loopback by default; the page has no login).",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8080,
    show_default=True,
    help="Port to listen on (0 picks a free one).",
)
@click.option(
    "--idle-timeout",
    envvar="DAGRUN_WEB_IDLE_SECONDS",
    type=click.IntRange(min=1),
    default=IDLE_SECONDS,
    show_default=True,
    help="Close a connection after this many seconds without traffic "
    "(env DAGRUN_WEB_IDLE_SECONDS).",
)
@pass_app
def web(app: App, host: str, port: int, idle_timeout: int) -> None:
    """Serve the read-only web page: DAGs, run grid, runs, logs, /api, /metrics."""
    listener = bind_listener(host, port)
    setup_logging(app.verbose)
    app.service_store()  # pages answer 503 during an outage, which is logged once
    server = WebServer(WebApp(app.store), listener, idle_seconds=idle_timeout)
    bound_host, bound_port = server.server_address
    click.echo(f"dagrun web: serving http://{bound_host}:{bound_port}/ (Ctrl+C to stop)", err=True)
    # shutdown() waits for serve_forever() to return, so it must run on another thread.
    with stop_signals(lambda: threading.Thread(target=server.shutdown, daemon=True).start()):
        server.serve_forever()
    server.server_close()
    log.info("dagrun web stopped")


COMMANDS = [web]

"""``dagrun web``: serve the read-only run grid page and JSON API.

The address is bound before the database is opened, so a busy port or a host name that does
not resolve is bad input (exit 2, one line) and costs no schema check.

On a loopback address nobody logs in. On any other address the page asks for a login
(``dagrun users add NAME``) and refuses to start while the store has no account, unless
``--no-auth`` is given, which it then warns of at every start.
"""

from __future__ import annotations

import logging
import threading

import click

from dagrun import settings
from dagrun.cli.app import App, pass_app, stop_signals
from dagrun.cli.log_setup import setup_logging
from dagrun.errors import UsageError
from dagrun.store import Store, accounts
from dagrun.webapp import WebApp
from dagrun.webapp.auth import Gate
from dagrun.webapp.server import WebServer, bind_listener, is_loopback

log = logging.getLogger("dagrun.web")


@click.command("web")
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on (loopback by default: no login; any other address asks for "
    "one, see `dagrun users`).",
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
    type=click.IntRange(min=1),
    default=None,
    help="Close a connection after this many seconds without traffic "
    "(setting web.idle_seconds, env DAGRUN_WEB_IDLE_SECONDS; default 30).",
)
@click.option(
    "--no-auth",
    is_flag=True,
    help="Serve a non-loopback address without a login: anyone who can reach it sees every "
    "page, log and the audit trail.",
)
@click.option(
    "--trusted-proxy",
    is_flag=True,
    default=None,
    help="A proxy in front sets X-Forwarded-For (the client's address) and X-Forwarded-Proto "
    "(https: cookies are Secure); believe them (env DAGRUN_WEB_TRUSTED_PROXY).",
)
@pass_app
def web(
    app: App,
    host: str,
    port: int,
    idle_timeout: int | None,
    no_auth: bool,
    trusted_proxy: bool | None,
) -> None:
    """Serve the read-only web page: DAGs, run grid, runs, logs, /api, /metrics."""
    listener = bind_listener(host, port)
    bound_host, bound_port = listener.getsockname()[:2]
    setup_logging(app.verbose)
    app.service_store()  # pages answer 503 during an outage, which is logged once
    try:
        gate = _gate(app.store, bound_host, bound_port, no_auth, trusted_proxy)
    except UsageError:
        listener.close()
        raise
    idle = idle_timeout or settings.get("web.idle_seconds")
    server = WebServer(WebApp(app.store, gate=gate), listener, idle_seconds=idle)
    login = "; login required" if gate else ""
    click.echo(
        f"dagrun web: serving http://{_where(bound_host, bound_port)}/{login} (Ctrl+C to stop)",
        err=True,
    )
    # shutdown() waits for serve_forever() to return, so it must run on another thread.
    with stop_signals(lambda: threading.Thread(target=server.shutdown, daemon=True).start()):
        server.serve_forever()
    server.server_close()
    log.info("dagrun web stopped")


def _gate(
    store: Store, host: str, port: int, no_auth: bool, trusted_proxy: bool | None
) -> Gate | None:
    """The login a server bound to ``host`` asks for: none on loopback or with --no-auth
    (warned of), else one over the store's accounts, which must exist."""
    if is_loopback(host):
        return None
    where = _where(host, port)
    if no_auth:
        click.echo(
            f"warning: --no-auth: {where} is not a loopback address, and every page, log and "
            "the audit trail are served without a login to anyone who can reach it",
            err=True,
        )
        return None
    with store.write() as conn:
        if not accounts.has_accounts(conn):
            raise UsageError(
                f"{where} is not a loopback address and the store has no account to log in "
                "with: add one with `dagrun users add NAME`, or serve without a login "
                "with --no-auth"
            )
        key = accounts.session_key(conn)
    if trusted_proxy is None:
        trusted_proxy = bool(settings.get("web.trusted_proxy"))
    return Gate(key, trusted_proxy=trusted_proxy)


def _where(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


COMMANDS = [web]

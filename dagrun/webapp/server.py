"""The threaded WSGI server that ``dagrun web`` runs the application in."""

from __future__ import annotations

import logging
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from dagrun.webapp.app import WebApp

log = logging.getLogger("dagrun.web")


class ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    """One thread per request, so a slow client never stalls the page for everyone else."""

    daemon_threads = True
    allow_reuse_address = True


class _LoggingHandler(WSGIRequestHandler):
    """Access lines go to the ``dagrun.web`` logger instead of raw stderr."""

    def log_message(self, format: str, *args: Any) -> None:
        log.info("%s %s", self.address_string(), format % args)


def make_web_server(app: WebApp, host: str, port: int) -> WSGIServer:
    """A threaded WSGI server bound to ``host:port`` (port 0 picks a free one)."""
    return make_server(
        host, port, app, server_class=ThreadingWSGIServer, handler_class=_LoggingHandler
    )
